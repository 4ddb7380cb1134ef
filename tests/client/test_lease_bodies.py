"""What the client writes to the Lease: the same fields as the existing submit paths."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from client.lease_ops import claimed_body, describe_holder, new_lease_body, released_body
from elbgate.lease import Expiry, LeaseView, parse_microtime

NOW = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)
EARLIER = "2026-11-29T11:50:00.000000Z"


def existing(holder: str = "dashboard-aa", transitions: int | None = 2) -> dict:
    spec: dict = {
        "holderIdentity": holder,
        "leaseDurationSeconds": 900,
        "acquireTime": EARLIER,
        "renewTime": EARLIER,
    }
    if transitions is not None:
        spec["leaseTransitions"] = transitions
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "elb-blast-submit-blast",
            "namespace": "blast",
            "resourceVersion": "41",
            "annotations": {"elb-gate.io/holder-user": "dash"},
        },
        "spec": spec,
    }


def test_a_new_lease_names_the_namespace_and_carries_holder_ttl_and_microtimes() -> None:
    body = new_lease_body("blast", "cli-1234", 900, NOW)
    assert body["metadata"] == {"name": "elb-blast-submit-blast", "namespace": "blast"}
    assert body["spec"] == {
        "holderIdentity": "cli-1234",
        "leaseDurationSeconds": 900,
        "acquireTime": "2026-11-29T12:00:00.123456Z",
        "renewTime": "2026-11-29T12:00:00.123456Z",
    }
    assert parse_microtime(body["spec"]["renewTime"]) == NOW


def test_a_renewal_keeps_acquire_time_transitions_version_and_annotations() -> None:
    current = existing("cli-1")
    body = claimed_body(current, "cli-1", 600, NOW)
    assert body["spec"]["acquireTime"] == EARLIER
    assert body["spec"]["leaseTransitions"] == 2
    assert body["spec"]["renewTime"] == "2026-11-29T12:00:00.123456Z"
    assert body["spec"]["leaseDurationSeconds"] == 600
    assert body["metadata"]["resourceVersion"] == "41"
    assert body["metadata"]["annotations"] == {"elb-gate.io/holder-user": "dash"}


def test_a_takeover_sets_a_new_acquire_time_and_counts_a_transition() -> None:
    body = claimed_body(existing("dashboard-aa"), "cli-2", 900, NOW)
    assert body["spec"]["holderIdentity"] == "cli-2"
    assert body["spec"]["acquireTime"] == "2026-11-29T12:00:00.123456Z"
    assert body["spec"]["leaseTransitions"] == 3
    assert body["metadata"]["resourceVersion"] == "41"


def test_a_takeover_of_a_lease_without_transitions_starts_counting_at_one() -> None:
    body = claimed_body(existing("", transitions=None), "cli-2", 900, NOW)
    assert body["spec"]["leaseTransitions"] == 1


def test_a_release_only_clears_the_holder_and_keeps_the_version_for_the_cas() -> None:
    current = existing("cli-1")
    before = copy.deepcopy(current)
    body = released_body(current)
    assert body["spec"]["holderIdentity"] == ""
    assert body["metadata"]["resourceVersion"] == "41"
    assert {k: v for k, v in body["spec"].items() if k != "holderIdentity"} == {
        k: v for k, v in before["spec"].items() if k != "holderIdentity"
    }
    assert current == before, "the caller's object is not modified"


def test_the_busy_reason_names_holder_user_and_takeover_time() -> None:
    view = LeaseView.from_dict(existing("dashboard-aa"))
    assert describe_holder(view, Expiry(30, 900)) == (
        "held by dashboard-aa (user dash) until 2026-11-29T12:05:30.000000Z"
    )
