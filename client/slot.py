"""``run_slot``: wait for the Lease and for capacity, then hold the slot while
the submit runs. The I/O around :mod:`client.slot_machine`.

::

    with run_slot(lease, settings.client, on_state=show, cancel=stop) as slot:
        subprocess.run(["elastic-blast", "submit", ...], timeout=...)

Entering the ``with`` blocks until the slot is held (census under the Lease says
there is room) or raises :class:`SubmitSlotTimeout`, :class:`CapacityTimeout`,
:class:`SlotCancelled` or :class:`CoordinationError`. While the body runs a
heartbeat renews the Lease; leaving the body releases it, whatever happened.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from client.errors import (
    CapacityTimeout,
    CoordinationError,
    SlotCancelled,
    SubmitSlotTimeout,
)
from client.observe import read_census
from client.slot_machine import (
    DEFAULT_POLL_SECONDS,
    Action,
    ApiFailed,
    Cancelled,
    CensusTaken,
    HeldElsewhere,
    LeaseAcquired,
    Observation,
    Phase,
    SlotLimits,
    SlotState,
    transition,
)
from client.submit_lease import DEFAULT_HEARTBEAT_FRACTION, Heartbeat, SubmitLease
from client.waiting_room import WaitingRoom
from elbgate.census import Census
from elbgate.durations import format_duration
from elbgate.settings import ClientSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SlotEvent:
    """One state change, as passed to the ``on_state`` callback."""

    phase: Phase
    detail: str
    waited_seconds: float
    """Time since ``run_slot`` started."""


@dataclass
class Slot:
    """A held submit slot: the Lease (renewed by ``heartbeat``) and the census
    that showed room for one more search."""

    lease: SubmitLease
    census: Census
    waited_seconds: float
    heartbeat: Heartbeat | None

    @property
    def holder(self) -> str:
        return self.lease.holder


@contextmanager
def run_slot(
    lease: SubmitLease,
    client: ClientSettings,
    *,
    on_state: Callable[[SlotEvent], None] | None = None,
    cancel: threading.Event | None = None,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    heartbeat: bool = True,
    heartbeat_fraction: float = DEFAULT_HEARTBEAT_FRACTION,
    on_heartbeat: Callable[[str, Exception], None] | None = None,
    census_reader: Callable[[], Census] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    watch: bool = True,
    waiting_room: WaitingRoom | None = None,
) -> Iterator[Slot]:
    """Wait for a submit slot, yield it, release it. See the module docstring.

    ``on_state`` gets a :class:`SlotEvent` on every change of phase or detail;
    ``cancel`` stops the wait (raising :class:`SlotCancelled`); ``poll_seconds`` is
    the retry interval while busy or full (the fallback when watching);
    ``on_heartbeat("lost"|"error", exc)`` reports renewal trouble while the body
    runs; ``census_reader`` replaces the census LIST (tests); ``monotonic`` is the
    clock of the deadlines. With ``watch`` (the default) a waiter watches the Lease
    and the search Jobs and queues in the namespace's waiting line
    (:mod:`client.waiting_line`): it tries again the moment a slot frees, in
    its turn; ``waiting_room`` supplies one (tests).
    """
    cancel = cancel or threading.Event()
    limits = SlotLimits.from_settings(lease.gate, client, poll_seconds)
    read = census_reader or (lambda: read_census(lease.kube, lease.namespace, lease.gate))
    started = monotonic()

    def report(phase: Phase, detail: str) -> None:
        if on_state is not None:
            on_state(SlotEvent(phase, detail, monotonic() - started))

    state = SlotState()
    report(state.phase, f"Lease {lease.namespace}/{lease.name} as {lease.holder}")
    action = Action.ACQUIRE
    error: CoordinationError | None = None
    seen: Census | None = None
    room = waiting_room
    if room is None and watch:
        room = WaitingRoom(lease.kube, lease.namespace, lease.holder, lease.gate)
    try:
        while True:
            obs: Observation
            if cancel.is_set():
                obs = Cancelled()
            elif action is Action.ACQUIRE:
                try:
                    result = lease.acquire()
                    obs = LeaseAcquired() if result.acquired else HeldElsewhere(result.reason)
                except CoordinationError as exc:
                    error, obs = exc, ApiFailed(str(exc))
            else:
                try:
                    seen = read()
                    obs = CensusTaken(seen.active_ids)
                except CoordinationError as exc:
                    error, obs = exc, ApiFailed(str(exc))
            if room is not None and room.entered:
                if isinstance(obs, HeldElsewhere):
                    room.tried("busy")
                elif isinstance(obs, CensusTaken) and len(obs.active_ids) >= limits.ceiling:
                    room.tried("full")
            step = transition(state, obs, monotonic(), limits)
            if step.release:
                _release_quietly(lease)
            if (step.state.phase, step.state.detail) != (state.phase, state.detail):
                report(step.state.phase, step.state.detail)
            state = step.state
            if step.action is Action.PROCEED:
                break
            if step.action is Action.FAIL:
                _raise_for(state, error, monotonic() - started)
            if step.sleep > 0:
                if room is None:
                    cancel.wait(step.sleep)
                else:
                    # Watch (and queue) instead of sleeping: back as soon as it is our
                    # turn, and never later than a deadline that falls sooner.
                    room.enter()
                    room.wait(limits.poll_seconds, cancel, step.deadline_in)
            action = step.action
    except BaseException:
        # KeyboardInterrupt or a bug: never leave the Lease held behind us.
        _release_quietly(lease)
        raise
    finally:
        if room is not None and room.entered:
            room.leave()  # out of the line: the slot is ours, or we gave up

    assert seen is not None
    beat = lease.start_heartbeat(heartbeat_fraction, on_heartbeat) if heartbeat else None
    try:
        yield Slot(lease, seen, monotonic() - started, beat)
    finally:
        try:
            freed = lease.release()
            report(Phase.RELEASED, "Lease released" if freed else "Lease was no longer ours")
        except CoordinationError as exc:
            # The submit's own outcome matters more; the Lease expires by itself.
            log.warning("could not release the submit Lease: %s", exc)
            report(Phase.RELEASED, f"release failed; the Lease expires on its own: {exc}")


def _release_quietly(lease: SubmitLease) -> None:
    try:
        lease.release()
    except CoordinationError as exc:
        log.warning("could not release the submit Lease: %s", exc)


def _raise_for(state: SlotState, error: CoordinationError | None, waited: float) -> None:
    if state.phase is Phase.SUBMIT_SLOT_TIMEOUT:
        raise SubmitSlotTimeout(
            f"no submit slot within the wait limit ({format_duration(waited)}): {state.detail}",
            waited,
        )
    if state.phase is Phase.CAPACITY_TIMEOUT:
        raise CapacityTimeout(
            f"the namespace stayed at its ceiling for the wait limit ({format_duration(waited)}): "
            f"{state.detail}",
            waited,
        )
    if state.phase is Phase.CANCELLED:
        raise SlotCancelled("cancelled while waiting for a submit slot", waited)
    if error is not None:
        raise error
    raise RuntimeError(f"slot machine failed in {state.phase}: {state.detail}")
