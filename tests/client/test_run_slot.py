"""run_slot against the real API server with elb-gate's webhook: Lease, census
under it, waits, deadlines, cancel. Searches already running are real Jobs
whose Pods run until a test lets one finish."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from client import (
    CapacityTimeout,
    CoordinationError,
    Phase,
    SlotCancelled,
    SlotEvent,
    SubmitLease,
    SubmitSlotTimeout,
    SyncKube,
    run_slot,
)
from elbgate.settings import Settings
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.webhook_process import WebhookProcess
from tests.client.conftest import (
    complete,
    holder_of,
    job_name,
    lease_of,
    search_job,
    small_settings,
    sync_kube,
)


class Recorder:
    """Collects state changes; lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[SlotEvent] = []
        self._changed = threading.Condition()

    def __call__(self, event: SlotEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    @property
    def phases(self) -> list[Phase]:
        return [e.phase for e in self.events]

    def wait_for(self, phase: Phase, deadline: float = 30) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: phase in self.phases, deadline), self.phases


@pytest.fixture
def other(kube_of: Callable[[str], SyncKube], ns: str) -> SubmitLease:
    """Another submit path's Lease client (the dashboard, as bob)."""
    return SubmitLease(ns, gate=small_settings().gate, source="dashboard", kube=kube_of("bob"))


def mine(kube: SyncKube, settings: Settings, ns: str) -> SubmitLease:
    return SubmitLease(ns, gate=settings.gate, source="cli", kube=kube)


@pytest.fixture
def faulty(control_plane: ControlPlane, proxy: FaultProxy) -> Iterator[SyncKube]:
    """alice's transport through the fault proxy; faults cleared after the test."""
    transport = sync_kube(proxy.kubeconfig(control_plane.token("alice"), "alice"), timeout=5)
    try:
        yield transport
    finally:
        transport.close()
        proxy.clear()


def seed(cp: ControlPlane, hook: WebhookProcess, namespace: str, *jobs: dict) -> str:
    """Searches already running when elb-gate is installed: created, then the
    namespace gated. Returns the namespace."""
    for job in jobs:
        cp.admin.create(job)
    return hook.install.gate(namespace)


def test_a_free_namespace_gives_a_slot_holding_the_lease_then_releases(
    control_plane: ControlPlane, kube: SyncKube, ns: str
) -> None:
    settings = small_settings()
    seen = Recorder()
    with run_slot(
        mine(kube, settings, ns), settings.client, on_state=seen, poll_seconds=0.05
    ) as slot:
        assert holder_of(control_plane, ns) == slot.holder
        assert slot.census.count == 0 and slot.heartbeat is not None
    assert holder_of(control_plane, ns) == ""
    assert seen.phases == [Phase.ACQUIRING, Phase.CHECKING_CAPACITY, Phase.READY, Phase.RELEASED]


def test_a_busy_lease_is_waited_for_and_then_won(
    control_plane: ControlPlane, kube: SyncKube, other: SubmitLease, ns: str
) -> None:
    settings = small_settings()
    other.acquire()
    seen = Recorder()

    def release_when_waiting() -> None:
        seen.wait_for(Phase.WAITING_FOR_SUBMIT_SLOT)
        other.release()

    releaser = threading.Thread(target=release_when_waiting)
    releaser.start()
    with run_slot(
        mine(kube, settings, ns), settings.client, on_state=seen, poll_seconds=0.05
    ) as slot:
        assert holder_of(control_plane, ns) == slot.holder
    releaser.join()
    waiting = next(e for e in seen.events if e.phase is Phase.WAITING_FOR_SUBMIT_SLOT)
    assert f"held by {other.holder} (user bob) until " in waiting.detail


def test_a_busy_lease_past_the_slot_deadline_times_out(
    control_plane: ControlPlane, kube: SyncKube, other: SubmitLease, ns: str
) -> None:
    settings = small_settings(BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS="0")
    other.acquire()
    with (
        pytest.raises(SubmitSlotTimeout, match=other.holder),
        run_slot(mine(kube, settings, ns), settings.client, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
    assert holder_of(control_plane, ns) == other.holder


def test_at_the_ceiling_it_releases_the_lease_waits_and_proceeds_when_a_search_ends(
    control_plane: ControlPlane, hook: WebhookProcess, kube: SyncKube, fresh_ns: str
) -> None:
    settings = small_settings(BLAST_MAX_RUN_CONCURRENCY="2")
    s1, s2 = search_job(fresh_ns, "s1"), search_job(fresh_ns, "s2")
    ns = seed(control_plane, hook, fresh_ns, s1, s2)
    seen = Recorder()
    lease_while_full: list[str] = []

    def finish_one() -> None:
        seen.wait_for(Phase.WAITING_FOR_CAPACITY)
        lease_while_full.append(holder_of(control_plane, ns))
        complete(control_plane, ns, job_name(s1))

    helper = threading.Thread(target=finish_one)
    helper.start()
    with run_slot(
        mine(kube, settings, ns), settings.client, on_state=seen, poll_seconds=0.05
    ) as slot:
        assert slot.census.active_ids == ("s2",)
        assert holder_of(control_plane, ns) == slot.holder
    helper.join()
    assert lease_while_full == [""], "the Lease is not held while waiting for capacity"
    full = next(e for e in seen.events if e.phase is Phase.WAITING_FOR_CAPACITY)
    assert full.detail == "2/2 active: s1, s2"


def test_at_the_ceiling_past_the_capacity_deadline_times_out_with_the_lease_free(
    control_plane: ControlPlane, hook: WebhookProcess, kube: SyncKube, fresh_ns: str
) -> None:
    settings = small_settings(BLAST_MAX_RUN_CONCURRENCY="1", BLAST_CAPACITY_WAIT_MAX_SECONDS="0")
    ns = seed(control_plane, hook, fresh_ns, search_job(fresh_ns, "s1", app="submit"))
    with (
        pytest.raises(CapacityTimeout, match="1/1 active: s1"),
        run_slot(mine(kube, settings, ns), settings.client, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
    assert holder_of(control_plane, ns) == ""


def test_a_census_read_error_fails_closed_and_releases(
    control_plane: ControlPlane, faulty: SyncKube, proxy: FaultProxy, ns: str
) -> None:
    settings = small_settings()
    proxy.add(method="GET", resource="jobs", status=500)
    with (
        pytest.raises(CoordinationError, match="list jobs"),
        run_slot(mine(faulty, settings, ns), settings.client, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
    assert holder_of(control_plane, ns) == ""


def test_an_outage_while_acquiring_is_an_error_not_an_endless_wait(
    control_plane: ControlPlane, faulty: SyncKube, proxy: FaultProxy, ns: str
) -> None:
    settings = small_settings()
    proxy.add(method="GET", resource="leases", status=503, count=None)
    seen = Recorder()
    with (
        pytest.raises(CoordinationError, match="503"),
        run_slot(mine(faulty, settings, ns), settings.client, on_state=seen, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
    assert Phase.WAITING_FOR_SUBMIT_SLOT not in seen.phases
    assert seen.phases[-1] is Phase.COORDINATION_ERROR
    assert lease_of(control_plane, ns) is None


def test_cancel_while_waiting_stops_without_holding_anything(
    control_plane: ControlPlane, kube: SyncKube, other: SubmitLease, ns: str
) -> None:
    settings = small_settings()
    other.acquire()
    cancel = threading.Event()
    seen = Recorder()

    def cancel_when_waiting() -> None:
        seen.wait_for(Phase.WAITING_FOR_SUBMIT_SLOT)
        cancel.set()

    canceller = threading.Thread(target=cancel_when_waiting)
    canceller.start()
    with (
        pytest.raises(SlotCancelled),
        run_slot(
            mine(kube, settings, ns), settings.client, on_state=seen, cancel=cancel, poll_seconds=5
        ),
    ):
        pytest.fail("the body must not run")
    canceller.join()
    assert holder_of(control_plane, ns) == other.holder
    assert seen.phases[-1] is Phase.CANCELLED


def test_an_exception_in_the_body_still_releases(
    control_plane: ControlPlane, kube: SyncKube, ns: str
) -> None:
    settings = small_settings()
    with (
        pytest.raises(RuntimeError, match="submit failed"),
        run_slot(mine(kube, settings, ns), settings.client, poll_seconds=0.05),
    ):
        assert holder_of(control_plane, ns) != ""
        raise RuntimeError("submit failed")
    assert holder_of(control_plane, ns) == ""


def test_the_slot_holders_search_is_admitted_and_counted_by_the_next_submit(
    control_plane: ControlPlane, kube_of: Callable[[str], SyncKube], ns: str
) -> None:
    # Inside the slot the submitter creates its search (the webhook admits it for
    # the Lease holder); the next submit's census under the Lease then counts it.
    settings = small_settings(BLAST_MAX_RUN_CONCURRENCY="1", BLAST_CAPACITY_WAIT_MAX_SECONDS="0")
    alice = control_plane.api("alice")
    with run_slot(mine(kube_of("alice"), settings, ns), settings.client, poll_seconds=0.05):
        alice.create(search_job(ns, "mine", app="finalizer"))
    with (
        pytest.raises(CapacityTimeout, match="1/1 active: mine"),
        run_slot(mine(kube_of("bob"), settings, ns), settings.client, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
