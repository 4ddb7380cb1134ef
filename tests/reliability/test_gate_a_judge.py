"""The exact Gate A judge, on audit records written by hand: who held the Lease at the
revision each Job committed at, and whether each Lease write kept the guard's rules."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from testbed.reliability.audit import AuditTail, Seen
from testbed.reliability.gate_a import (
    Terms,
    committed_deletes,
    committed_writes,
    judge_gated_create,
    judge_lease,
    lease_timeline,
    parse_time,
    state_before,
)

NS = "ns"
LEASE = f"elb-blast-submit-{NS}"
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CONTROLLER = "system:serviceaccount:elb-system:elb-gate-controller"
TERMS = Terms(skew_seconds=1, default_duration=5, controller_user=CONTROLLER)


def stamp(at: float) -> str:
    return (T0 + timedelta(seconds=at)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(
    rv: int,
    verb: str,
    resource: str,
    name: str,
    user: str,
    obj: dict[str, Any],
    at: float,
    took: float = 0.01,
    code: int = 200,
    uri: str = "",
) -> dict[str, Any]:
    """An audit.k8s.io/v1 Event as the API server logs it at RequestResponse level."""
    obj = {
        **obj,
        "metadata": {
            **obj.get("metadata", {}),
            "name": name,
            "namespace": NS,
            "resourceVersion": str(rv),
        },
    }
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "RequestResponse",
        "stage": "ResponseComplete",
        "requestURI": uri or f"/apis/x/v1/namespaces/{NS}/{resource}",
        "verb": verb,
        "user": {"username": user},
        "objectRef": {"resource": resource, "namespace": NS, "name": name},
        "responseStatus": {"code": code},
        "responseObject": obj,
        "requestReceivedTimestamp": stamp(at),
        "stageTimestamp": stamp(at + took),
    }


def lease(
    rv: int,
    verb: str,
    user: str,
    holder: str,
    at: float,
    *,
    stamped: str | None = None,
    duration: int = 5,
    renewed: float | None = None,
) -> dict[str, Any]:
    annotations = (
        {"elb-gate.io/holder-user": stamped if stamped is not None else user} if holder else {}
    )
    body = {
        "kind": "Lease",
        "metadata": {"annotations": annotations},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": stamp(at if renewed is None else renewed),
        },
    }
    return event(rv, verb, "leases", LEASE, user, body, at)


def create_job(
    rv: int, user: str, at: float, app: str = "finalizer", took: float = 0.01
) -> dict[str, Any]:
    body = {
        "kind": "Job",
        "metadata": {"labels": {"app": app, "elb-job-id": "s1"}, "uid": f"j{rv}"},
    }
    return event(rv, "create", "jobs", f"job-{rv}", user, body, at, took=took, code=201)


def judge(events: list[dict[str, Any]]) -> list[str | None]:
    writes = committed_writes(events)
    timeline = lease_timeline(writes, NS)
    return [judge_gated_create(w, timeline, TERMS) for w in writes if w.resource == "jobs"]


def test_the_holder_creating_within_its_hold_passes() -> None:
    assert judge([lease(10, "create", "alice", "a-1", 0), create_job(11, "alice", 1)]) == [None]


def test_anyone_else_is_caught_by_the_authenticated_identity_not_the_stamp() -> None:
    forged = lease(10, "create", "alice", "a-1", 0, stamped="bob")
    found = judge([forged, create_job(11, "bob", 1)])
    assert found[0] is not None and "acquired by alice" in found[0]


def test_a_create_while_the_lease_is_free_or_missing_fails() -> None:
    assert "did not exist" in str(judge([create_job(5, "alice", 1)])[0])
    events = [
        lease(10, "create", "alice", "a-1", 0),
        lease(11, "update", "alice", "", 1),
        create_job(12, "alice", 2),
    ]
    assert "was free" in str(judge(events)[0])


def test_expiry_is_judged_against_the_request_arrival_without_slack() -> None:
    # renewTime 0, duration 5, skew 1: in force until 6.0
    held = lease(10, "create", "alice", "a-1", 0)
    assert judge([held, create_job(11, "alice", 5.99)]) == [None]
    assert "had expired" in str(judge([held, create_job(11, "alice", 6.0)])[0])
    # arrived before the expiry, answered after it: the webhook may have decided in time
    assert judge([held, create_job(11, "alice", 5.5, took=2.0)]) == [None]


def test_the_hold_is_the_one_in_force_at_the_jobs_revision() -> None:
    events = [
        lease(10, "create", "alice", "a-1", 0),
        lease(12, "update", "bob", "b-1", 7),  # takeover after alice's expiry
        create_job(11, "alice", 1),  # committed before the takeover
        create_job(13, "alice", 1, took=7),  # judged in time, committed after it
    ]
    found = judge(events)
    assert found[0] is None
    assert found[1] is not None and "b-1 held the Lease, acquired by bob" in found[1]


def test_revisions_are_ordered_as_integers() -> None:
    events = [
        lease(9, "create", "alice", "a-1", 0),
        lease(10, "update", "alice", "", 1),
        create_job(100, "alice", 2),
    ]
    writes = committed_writes(events)
    assert [w.rv for w in writes] == [9, 10, 100]
    assert state_before(lease_timeline(writes, NS), 100).write.rv == 10  # type: ignore[union-attr]


def test_refused_dry_run_and_status_writes_are_not_commits() -> None:
    refused = create_job(11, "bob", 1)
    refused["responseStatus"]["code"] = 403
    dry = create_job(12, "bob", 1)
    dry["requestURI"] += "?dryRun=All"
    status = create_job(13, "bob", 1)
    status["objectRef"]["subresource"] = "status"
    assert committed_writes([refused, dry, status]) == []


def delete_lease(user: str, at: float, uid: str = "lease-uid") -> dict[str, Any]:
    """A Lease DELETE as the API server logs it: answered with a Status naming the uid."""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": LEASE, "group": "coordination.k8s.io", "kind": "leases", "uid": uid},
    }
    e = event(0, "delete", "leases", LEASE, user, {}, at)
    e["responseObject"] = status
    return e


def test_a_delete_answered_with_a_status_is_placed_at_the_revision_the_watch_saw() -> None:
    events = [
        lease(10, "create", "alice", "", 0),
        delete_lease("alice", 1),
        create_job(13, "alice", 2),
    ]
    assert [w.rv for w in committed_writes(events)] == [10, 13]  # no revision in the answer
    (delete,) = committed_deletes(events)
    assert (delete.uid, delete.user, delete.name) == ("lease-uid", "alice", LEASE)
    writes = sorted([*committed_writes(events), delete.at(12)], key=lambda w: w.rv)
    timeline = lease_timeline(writes, NS)
    assert [(s.write.rv, s.deleted) for s in timeline] == [(10, False), (12, True)]
    assert "did not exist" in str(judge_gated_create(writes[-1], timeline, TERMS))


def test_a_refused_delete_or_one_that_returned_the_object_is_no_status_delete() -> None:
    refused = delete_lease("bob", 1)
    refused["responseStatus"]["code"] = 403
    marked = lease(11, "delete", "alice", "a-1", 1)  # finalizers pending: the object comes back
    marked["responseObject"]["metadata"]["finalizers"] = ["example.com/keep"]
    assert committed_deletes([refused, marked]) == []
    (state,) = lease_timeline(committed_writes([marked]), NS)
    assert not state.deleted and state.holder == "a-1"


def lost(verb: str, name: str, user: str, at: float, precondition: str = "") -> dict[str, Any]:
    """A write whose client went away first, as the API server logs it: 504, no object."""
    e = event(0, verb, "leases", name, user, {}, at)
    message = "Timeout: request did not complete within requested timeout - context canceled"
    e["responseStatus"] = {"code": 504, "message": message}
    e["responseObject"] = {"kind": "Status", "status": "Failure", "code": 504}
    e["requestObject"] = {"metadata": {"name": name, "resourceVersion": precondition}}
    return e


def test_a_write_whose_answer_was_lost_is_placed_at_the_revision_the_watch_saw(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    events = [
        lease(10, "create", "alice", "a-1", 0),
        lost("update", LEASE, "bob", 7, precondition="10"),  # took the expired hold over
        create_job(13, "bob", 8),
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    tail = AuditTail(log, [NS])
    tail.poll()
    taken = {
        "kind": "Lease",
        "metadata": {"annotations": {"elb-gate.io/holder-user": "bob"}},
        "spec": {"holderIdentity": "b-1", "leaseDurationSeconds": 5, "renewTime": stamp(7)},
    }
    seen = [
        Seen(10, "leases", LEASE, None, {}),
        Seen(12, "leases", LEASE, 10, taken),  # the watch: the write committed, at 12
        Seen(13, "jobs", "job-13", None, {}),
    ]
    writes, missing, _ = tail.account(NS, seen, {})
    assert missing == set()
    assert [(w.rv, w.verb, w.user) for w in writes] == [
        (10, "create", "alice"),
        (12, "update", "bob"),
        (13, "create", "bob"),
    ]
    assert judge_gated_create(writes[-1], lease_timeline(writes, NS), TERMS) is None
    # A compare-and-swap on another revision accounts for nothing.
    assert tail.account(NS, [Seen(12, "leases", LEASE, 11, taken)], {})[1] == {12}


def test_a_renewal_keeps_the_acquiring_user_and_moves_the_expiry() -> None:
    events = [
        lease(10, "create", "alice", "a-1", 0),
        lease(11, "update", "alice", "a-1", 4),  # renewed at 4: in force until 10
        create_job(12, "alice", 8),
    ]
    assert judge(events) == [None]


def test_lease_writes_follow_the_guards_rules() -> None:
    timeline = lease_timeline(
        committed_writes(
            [
                lease(1, "create", "alice", "a-1", 0),
                lease(2, "update", "bob", "b-1", 3),  # live takeover (alice in force until 6)
                lease(3, "update", "carol", "c-1", 20),  # takeover after expiry: fine
                lease(4, "update", "mallory", "c-1", 21, stamped="carol"),  # renews carol's hold
                lease(5, "update", "dave", "", 22),  # releases carol's live hold
                lease(6, "update", "erin", "e-1", 30),
                lease(7, "update", CONTROLLER, "", 31),  # controller clears a live hold
                lease(9, "update", "gina", "g-1", 50),
                lease(10, "update", CONTROLLER, "", 55.99),  # reached the API before expiry
                lease(8, "update", "frank", "f-1", 40, stamped="someone"),  # wrong stamp
            ]
        ),
        NS,
    )
    found = judge_lease(timeline, TERMS)
    assert found.takeovers == 3 and found.live_takeovers == 1
    assert [v.split(":")[0] for v in found.violations] == [
        "Lease rv 2",
        "Lease rv 4",
        "Lease rv 5",
        "Lease rv 8",
    ]
    assert [s.holder for s in found.cleared_live_by_controller] == ["e-1", "g-1"]


def test_a_release_by_its_own_user_or_after_expiry_is_fine() -> None:
    timeline = lease_timeline(
        committed_writes(
            [
                lease(1, "create", "alice", "a-1", 0),
                lease(2, "update", "alice", "", 1),
                lease(3, "update", "bob", "b-1", 2),
                lease(4, "update", CONTROLLER, "", 9),  # expired at 8
            ]
        ),
        NS,
    )
    found = judge_lease(timeline, TERMS)
    assert found.violations == [] and found.cleared_live_by_controller == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30T12:00:00Z", T0),
        ("2026-11-30T12:00:00.5Z", T0 + timedelta(milliseconds=500)),
        ("2026-11-30T12:00:00.123456789Z", T0 + timedelta(microseconds=123456)),
        ("", None),
        ("noon", None),
        (None, None),
    ],
)
def test_times_are_read_with_any_fraction(text: Any, expected: datetime | None) -> None:
    assert parse_time(text) == expected
