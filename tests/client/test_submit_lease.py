"""SubmitLease against the API emulator: the existing submit paths' protocol over real TLS."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from elbgate.client import CoordinationError, LeaseBusy, LeaseLost, SubmitLease, SyncKube
from elbgate.lease import format_microtime
from tests.client.conftest import LEASE, NS, holder_of, small_settings
from tests.kube_emulator import Emulator

SETTINGS = small_settings()


def lease(kube: SyncKube, source: str = "cli") -> SubmitLease:
    return SubmitLease(NS, settings=SETTINGS, source=source, kube=kube)


def wait_until(condition: Callable[[], bool], what: str, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_the_first_acquire_creates_the_lease_with_holder_ttl_and_times(
    emulator: Emulator, kube: SyncKube
) -> None:
    mine = lease(kube)
    result = mine.acquire()
    assert result.acquired and mine.held
    spec = emulator.get("leases", NS, LEASE)["spec"]
    assert spec["holderIdentity"] == mine.holder
    assert mine.holder.startswith("cli-") and len(mine.holder) == len("cli-") + 32
    assert spec["leaseDurationSeconds"] == 15
    assert spec["acquireTime"] == spec["renewTime"]


def test_a_second_submitter_is_told_busy_with_who_holds_it(
    emulator: Emulator, kube: SyncKube
) -> None:
    first, second = lease(kube, "dashboard"), lease(kube, "openapi")
    assert first.acquire().acquired
    result = second.acquire()
    assert not result.acquired and not second.held
    assert f"held by {first.holder} until " in result.reason
    assert holder_of(emulator) == first.holder


def test_losing_the_create_race_is_busy(emulator: Emulator, kube: SyncKube) -> None:
    # The other path creates the Lease between our GET (404) and our POST.
    winner = "dashboard-" + "a" * 32
    emulator.faults.add(method="GET", resource="leases", status=404, count=1)
    emulator.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": NS},
            "spec": {"holderIdentity": winner, "leaseDurationSeconds": 15},
        }
    )
    result = lease(kube).acquire()
    assert not result.acquired
    assert "created by another submitter first" in result.reason
    assert holder_of(emulator) == winner


def test_a_renewal_moves_renew_time_and_keeps_the_holder(
    emulator: Emulator, kube: SyncKube
) -> None:
    mine = lease(kube)
    mine.acquire()
    before = emulator.get("leases", NS, LEASE)
    mine.renew()
    after = emulator.get("leases", NS, LEASE)
    assert after["spec"]["holderIdentity"] == mine.holder
    assert after["spec"]["renewTime"] > before["spec"]["renewTime"]
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]


def test_an_expired_lease_is_taken_over_with_a_transition(
    emulator: Emulator, kube: SyncKube
) -> None:
    old = lease(kube, "dashboard")
    old.acquire()
    stale = emulator.get("leases", NS, LEASE)
    long_ago = time_ago(60)
    stale["spec"]["renewTime"] = long_ago
    emulator.update(stale)
    new = lease(kube, "openapi")
    assert new.acquire().acquired
    spec = emulator.get("leases", NS, LEASE)["spec"]
    assert spec["holderIdentity"] == new.holder
    assert spec["leaseTransitions"] == 1
    with pytest.raises(LeaseLost):
        old.renew()
    assert old.lost.is_set()


def test_a_lease_inside_the_skew_margin_is_not_taken_over(
    emulator: Emulator, kube: SyncKube
) -> None:
    old = lease(kube, "dashboard")
    old.acquire()
    stale = emulator.get("leases", NS, LEASE)
    stale["spec"]["renewTime"] = time_ago(15.5)  # past the TTL, inside TTL + 1 s skew
    emulator.update(stale)
    assert not lease(kube, "openapi").acquire().acquired


def test_release_clears_the_holder_and_never_deletes(emulator: Emulator, kube: SyncKube) -> None:
    mine = lease(kube)
    mine.acquire()
    assert mine.release() is True
    assert holder_of(emulator) == ""
    assert not mine.held
    assert mine.release() is False, "a second release is a no-op"


def test_release_after_a_takeover_leaves_the_new_holder_alone(
    emulator: Emulator, kube: SyncKube
) -> None:
    old = lease(kube, "dashboard")
    old.acquire()
    stale = emulator.get("leases", NS, LEASE)
    stale["spec"]["renewTime"] = time_ago(60)
    emulator.update(stale)
    new = lease(kube, "openapi")
    new.acquire()
    # old's PUT conflicts (stale resourceVersion); the one re-read shows it is not ours.
    assert old.release() is False
    assert holder_of(emulator) == new.holder


def test_release_retries_once_after_an_unrelated_write(emulator: Emulator, kube: SyncKube) -> None:
    mine = lease(kube)
    mine.acquire()
    other_write = emulator.get("leases", NS, LEASE)
    other_write["metadata"]["labels"] = {"touched": "yes"}
    emulator.update(other_write)  # bumps resourceVersion; holder unchanged
    assert mine.release() is True
    assert holder_of(emulator) == ""


@pytest.mark.parametrize(
    "fault",
    [
        {"method": "GET", "status": 500},
        {"method": "GET", "status": 503},
        {"method": "GET", "status": 403},
        {"method": "GET", "drop": True, "count": None},
        {"method": "POST", "status": 500},
    ],
    ids=["500", "503", "403", "dropped", "create-500"],
)
def test_an_api_failure_is_an_error_never_busy(
    emulator: Emulator, kube: SyncKube, fault: dict[str, object]
) -> None:
    emulator.faults.add(resource="leases", **fault)  # type: ignore[arg-type]
    mine = lease(kube)
    with pytest.raises(CoordinationError) as caught:
        mine.acquire()
    assert "busy" not in str(caught.value).replace("Not treated as busy", "")
    assert not mine.held


def test_a_forbidden_read_names_rbac_and_what_to_grant(emulator: Emulator, kube: SyncKube) -> None:
    emulator.faults.add(method="GET", resource="leases", status=403)
    with pytest.raises(CoordinationError) as caught:
        lease(kube).acquire()
    assert caught.value.status == 403
    assert "forbidden by RBAC" in str(caught.value)
    assert "get/create/update on leases.coordination.k8s.io" in str(caught.value)


def test_an_unanswered_create_is_released_by_reading_first(
    emulator: Emulator, kube: SyncKube
) -> None:
    # The POST lands but its answer is lost: we may hold the Lease without knowing.
    emulator.faults.add(method="POST", resource="leases", status=None, drop=True, count=1)
    mine = lease(kube)
    try:
        mine.acquire()
    except CoordinationError:
        pass
    mine.release()
    found = emulator.find("leases", NS, LEASE)
    assert found is None or found["spec"].get("holderIdentity") in ("", None)


def test_the_context_manager_holds_then_releases(emulator: Emulator, kube: SyncKube) -> None:
    with lease(kube) as held:
        assert holder_of(emulator) == held.holder
    assert holder_of(emulator) == ""


def test_the_context_manager_raises_busy_without_touching_the_holder(
    emulator: Emulator, kube: SyncKube
) -> None:
    first = lease(kube, "dashboard")
    first.acquire()
    with pytest.raises(LeaseBusy, match=first.holder), lease(kube):
        pass
    assert holder_of(emulator) == first.holder


def test_the_heartbeat_renews_until_release_and_then_stops(
    emulator: Emulator, kube: SyncKube
) -> None:
    mine = lease(kube)
    mine.acquire()
    renewals: list[str] = []
    emulator.subscribe(
        lambda kind, resource, obj: (
            renewals.append(obj["spec"]["renewTime"])
            if resource == "leases" and kind == "MODIFIED" and obj["spec"].get("holderIdentity")
            else None
        )
    )
    beat = mine.start_heartbeat(fraction=0.01)  # every 0.15 s
    wait_until(lambda: len(renewals) >= 3, "three heartbeat renewals")
    mine.release()
    assert not beat.is_alive()
    assert holder_of(emulator) == ""
    assert emulator.get("leases", NS, LEASE)["spec"]["holderIdentity"] == ""


def test_the_heartbeat_reports_a_lost_lease(emulator: Emulator, kube: SyncKube) -> None:
    mine = lease(kube)
    mine.acquire()
    events: list[str] = []
    got = threading.Event()

    def on_event(kind: str, exc: Exception) -> None:
        events.append(kind)
        got.set()

    taken = emulator.get("leases", NS, LEASE)
    taken["spec"]["holderIdentity"] = "other-" + "b" * 32
    emulator.update(taken)
    mine.start_heartbeat(fraction=0.01, on_event=on_event)
    assert got.wait(30)
    assert events == ["lost"] and mine.lost.is_set() and not mine.held
    mine.release()
    assert holder_of(emulator) == "other-" + "b" * 32


def time_ago(seconds: float) -> str:
    return format_microtime(datetime.now(UTC) - timedelta(seconds=seconds))
