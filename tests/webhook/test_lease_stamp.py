"""The mutating stamp: who took the Lease, from which pod, on the webhook's clock."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from elbgate.lease import format_microtime
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION
from tests.builders import NOW, admission, lease, user
from webhook import lease_stamp
from webhook.lease_request import LeaseRequest
from webhook.review import UserInfo

A = "openapi-6a1c0e6b5f8f4b83a1d2c3e4f5a6b7c8"
B = "dashboard-1f2e3d4c5b6a47989a8b7c6d5e4f3a2b"
STAMP = format_microtime(NOW)
OPENAPI_POD = user(
    "system:serviceaccount:blast:elb-openapi", pod="elb-openapi-7f9c", pod_uid="3f1d-uid"
)


def stamp(
    operation: str,
    new: dict[str, Any] | None,
    old: dict[str, Any] | None,
    who: UserInfo | None = None,
) -> tuple[dict[str, Any] | None, str]:
    request = admission(operation, new, old, who=who or user(), resource="leases")
    decision = lease_stamp.decide(LeaseRequest.from_admission(request), NOW)
    assert decision.allowed
    if new is None:
        assert not decision.patch
        return None, decision.reason
    return jsonpatch.apply_patch(new, list(decision.patch)), decision.reason


def annotations_of(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def bare(holder: str, client_time: str = "2020-01-01T00:00:00.000000Z") -> dict[str, Any]:
    """What a raw-HTTP client PUTs: no annotations, its own clock's renewTime."""
    obj = lease(holder, renew_raw=client_time)
    obj["metadata"].pop("annotations", None)
    return obj


def test_an_acquisition_stamps_user_and_the_webhook_clock() -> None:
    result, reason = stamp("CREATE", bare(A), None)
    assert reason == "acquired"
    assert annotations_of(result) == {HOLDER_USER_ANNOTATION: "alice"}
    assert result is not None
    assert result["spec"]["renewTime"] == STAMP and result["spec"]["acquireTime"] == STAMP


def test_a_bound_service_account_token_stamps_its_pod() -> None:
    result, _ = stamp("CREATE", bare(A), None, OPENAPI_POD)
    assert annotations_of(result) == {
        HOLDER_USER_ANNOTATION: "system:serviceaccount:blast:elb-openapi",
        HOLDER_POD_ANNOTATION: "blast/elb-openapi-7f9c/3f1d-uid",
    }


@pytest.mark.parametrize(
    "who",
    [user("alice", pod="p"), user("alice", pod="p", pod_uid="u"), user("bob", pod_uid="u")],
    ids=["pod without uid", "pod extras on a plain user", "uid without pod"],
)
def test_no_pod_stamp_without_a_complete_service_account_pod(who: UserInfo) -> None:
    result, _ = stamp("CREATE", bare(A), None, who)
    assert HOLDER_POD_ANNOTATION not in annotations_of(result)


def test_a_full_object_put_that_drops_annotations_keeps_the_stamps() -> None:
    stored = lease(
        A,
        holder_user="system:serviceaccount:blast:elb-openapi",
        holder_pod="blast/elb-openapi-7f9c/3f1d-uid",
        renewed_ago=60,
    )
    result, reason = stamp("UPDATE", bare(A), stored, OPENAPI_POD)
    assert reason == "renewed"
    assert annotations_of(result) == annotations_of(stored)
    assert result is not None
    assert result["spec"]["renewTime"] == STAMP
    # A renew is not an acquisition: the stored acquisition time stays.
    assert result["spec"].get("acquireTime") == stored["spec"].get("acquireTime")


def test_a_renew_keeps_the_stamped_acquire_time_whatever_the_client_sends() -> None:
    # Both existing clients reset acquireTime on every renew, on their own clocks.
    stored = lease(A, holder_user="alice", renewed_ago=60)
    stored["spec"]["acquireTime"] = "2026-11-29T11:00:00.000000Z"
    renewed = bare(A, client_time="2020-01-01T00:00:00.000000Z")
    renewed["spec"]["acquireTime"] = "2020-01-01T00:00:00.000000Z"
    result, reason = stamp("UPDATE", renewed, stored)
    assert reason == "renewed"
    assert result is not None
    assert result["spec"]["acquireTime"] == "2026-11-29T11:00:00.000000Z"
    assert result["spec"]["renewTime"] == STAMP


def test_a_renew_cannot_rewrite_the_stamps() -> None:
    stored = lease(A, holder_user="alice", renewed_ago=60)
    forged = lease(A, holder_user="mallory", holder_pod="x/y/z")
    result, _ = stamp("UPDATE", forged, stored, user("mallory"))
    assert annotations_of(result) == {HOLDER_USER_ANNOTATION: "alice"}


def test_other_annotations_are_left_alone() -> None:
    new = lease(A)
    new["metadata"]["annotations"] = {"team": "blast"}
    result, _ = stamp("CREATE", new, None)
    assert annotations_of(result) == {"team": "blast", HOLDER_USER_ANNOTATION: "alice"}


def test_a_takeover_restamps_user_pod_and_acquire_time() -> None:
    stored = lease(
        A,
        holder_user="system:serviceaccount:blast:elb-openapi",
        holder_pod="blast/elb-openapi-7f9c/3f1d-uid",
        renewed_ago=2000,
    )
    new = lease(
        B,
        holder_user="system:serviceaccount:blast:elb-openapi",
        holder_pod="blast/elb-openapi-7f9c/3f1d-uid",
    )
    result, reason = stamp("UPDATE", new, stored, user("dash"))
    assert reason == "acquired"
    assert annotations_of(result) == {HOLDER_USER_ANNOTATION: "dash"}
    assert result is not None and result["spec"]["acquireTime"] == STAMP


def test_a_release_clears_the_stamps_and_leaves_the_times() -> None:
    stored = lease(A, holder_user="alice", holder_pod="a/b/c", renewed_ago=60)
    released = lease("", holder_user="alice", holder_pod="a/b/c", renewed_ago=60)
    result, reason = stamp("UPDATE", released, stored)
    assert reason == "released"
    assert annotations_of(result) == {}
    assert result is not None and result["spec"]["renewTime"] == stored["spec"]["renewTime"]


def test_an_unstamped_lease_is_adopted_by_its_renewer() -> None:
    result, reason = stamp("UPDATE", bare(A), bare(A), user("bob"))
    assert reason == "renewed"
    assert annotations_of(result) == {HOLDER_USER_ANNOTATION: "bob"}


def test_other_leases_and_deletes_are_not_stamped() -> None:
    other = lease(A, name="kube-controller-manager")
    request = admission("UPDATE", other, other, resource="leases")
    decision = lease_stamp.decide(LeaseRequest.from_admission(request), NOW)
    assert (decision.reason, decision.patch) == ("not_gated", ())
    _, reason = stamp("DELETE", None, lease(A))
    assert reason == "not_gated"


def test_a_write_that_changes_nothing_stampable_yields_an_empty_patch() -> None:
    free = lease("", renewed_ago=100)
    result, reason = stamp("UPDATE", free, free)
    assert reason == "free" and result == free
