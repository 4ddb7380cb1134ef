"""run_slot against the emulator: Lease, census under it, waits, deadlines, cancel."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from elbgate.client import (
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
from tests.client.conftest import LEASE, NS, complete, holder_of, search_job, small_settings
from tests.kube_emulator import Emulator


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
def other(kube: SyncKube) -> Iterator[SubmitLease]:
    """Another submit path's Lease client."""
    yield SubmitLease(NS, settings=small_settings(), source="dashboard", kube=kube)


def mine(kube: SyncKube, settings: Settings) -> SubmitLease:
    return SubmitLease(NS, settings=settings, source="cli", kube=kube)


def test_a_free_namespace_gives_a_slot_holding_the_lease_then_releases(
    emulator: Emulator, kube: SyncKube
) -> None:
    settings = small_settings()
    seen = Recorder()
    with run_slot(mine(kube, settings), settings, on_state=seen, poll_seconds=0.05) as slot:
        assert holder_of(emulator) == slot.holder
        assert slot.census.count == 0 and slot.heartbeat is not None
    assert holder_of(emulator) == ""
    assert seen.phases == [Phase.ACQUIRING, Phase.CHECKING_CAPACITY, Phase.READY, Phase.RELEASED]


def test_a_busy_lease_is_waited_for_and_then_won(
    emulator: Emulator, kube: SyncKube, other: SubmitLease
) -> None:
    settings = small_settings()
    other.acquire()
    seen = Recorder()
    releaser = threading.Thread(
        target=lambda: (seen.wait_for(Phase.WAITING_FOR_SUBMIT_SLOT), other.release())
    )
    releaser.start()
    with run_slot(mine(kube, settings), settings, on_state=seen, poll_seconds=0.05) as slot:
        assert holder_of(emulator) == slot.holder
    releaser.join()
    waiting = next(e for e in seen.events if e.phase is Phase.WAITING_FOR_SUBMIT_SLOT)
    assert other.holder in waiting.detail


def test_a_busy_lease_past_the_slot_deadline_times_out(
    emulator: Emulator, kube: SyncKube, other: SubmitLease
) -> None:
    settings = small_settings(BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS="0")
    other.acquire()
    with (
        pytest.raises(SubmitSlotTimeout, match=other.holder),
        run_slot(mine(kube, settings), settings, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
    assert holder_of(emulator) == other.holder


def test_at_the_ceiling_it_releases_the_lease_waits_and_proceeds_when_a_search_ends(
    emulator: Emulator, kube: SyncKube
) -> None:
    settings = small_settings(BLAST_MAX_RUN_CONCURRENCY="2")
    for job_id in ("s1", "s2"):
        emulator.create(search_job(job_id))
    seen = Recorder()

    def finish_one() -> None:
        seen.wait_for(Phase.WAITING_FOR_CAPACITY)
        # The Lease is not held while waiting for capacity.
        assert holder_of(emulator) == ""
        complete(emulator, "blast-s1")

    helper = threading.Thread(target=finish_one)
    helper.start()
    with run_slot(mine(kube, settings), settings, on_state=seen, poll_seconds=0.05) as slot:
        assert slot.census.active_ids == ("s2",)
        assert holder_of(emulator) == slot.holder
    helper.join()
    full = next(e for e in seen.events if e.phase is Phase.WAITING_FOR_CAPACITY)
    assert full.detail == "2/2 active: s1, s2"


def test_at_the_ceiling_past_the_capacity_deadline_times_out_with_the_lease_free(
    emulator: Emulator, kube: SyncKube
) -> None:
    settings = small_settings(BLAST_MAX_RUN_CONCURRENCY="1", BLAST_CAPACITY_WAIT_MAX_SECONDS="0")
    emulator.create(search_job("s1", app="submit"))
    with (
        pytest.raises(CapacityTimeout, match="1/1 active: s1"),
        run_slot(mine(kube, settings), settings, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
    assert holder_of(emulator) == ""


def test_a_census_read_error_fails_closed_and_releases(emulator: Emulator, kube: SyncKube) -> None:
    settings = small_settings()
    emulator.faults.add(method="GET", resource="jobs", status=500)
    with (
        pytest.raises(CoordinationError, match="list jobs"),
        run_slot(mine(kube, settings), settings, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
    assert holder_of(emulator) == ""


def test_an_outage_while_acquiring_is_an_error_not_an_endless_wait(
    emulator: Emulator, kube: SyncKube
) -> None:
    settings = small_settings()
    emulator.faults.add(method="GET", resource="leases", status=503, count=None)
    seen = Recorder()
    with (
        pytest.raises(CoordinationError, match="503"),
        run_slot(mine(kube, settings), settings, on_state=seen, poll_seconds=0.05),
    ):
        pytest.fail("the body must not run")
    assert Phase.WAITING_FOR_SUBMIT_SLOT not in seen.phases
    assert seen.phases[-1] is Phase.COORDINATION_ERROR


def test_cancel_while_waiting_stops_without_holding_anything(
    emulator: Emulator, kube: SyncKube, other: SubmitLease
) -> None:
    settings = small_settings()
    other.acquire()
    cancel = threading.Event()
    seen = Recorder()
    canceller = threading.Thread(
        target=lambda: (seen.wait_for(Phase.WAITING_FOR_SUBMIT_SLOT), cancel.set())
    )
    canceller.start()
    with (
        pytest.raises(SlotCancelled),
        run_slot(mine(kube, settings), settings, on_state=seen, cancel=cancel, poll_seconds=5),
    ):
        pytest.fail("the body must not run")
    canceller.join()
    assert holder_of(emulator) == other.holder
    assert seen.phases[-1] is Phase.CANCELLED


def test_an_exception_in_the_body_still_releases(emulator: Emulator, kube: SyncKube) -> None:
    settings = small_settings()
    with (
        pytest.raises(RuntimeError, match="submit failed"),
        run_slot(mine(kube, settings), settings, poll_seconds=0.05),
    ):
        assert holder_of(emulator) != ""
        raise RuntimeError("submit failed")
    assert emulator.get("leases", NS, LEASE)["spec"]["holderIdentity"] == ""
