"""The submit-slot state machine, pure: ``transition(state, observation, now,
limits) -> Step``. No I/O and no clock reads, so it is tested as tables.

The driver (:mod:`client.slot`) performs the step's action — acquire the
Lease, take the census under it, proceed, or fail — after releasing the Lease
when the step says so and sleeping for ``step.sleep``, then feeds back what it
observed::

    acquiring ──acquired──▶ checking_capacity ──room──▶ ready (run the submit)
        │ busy                  │ full: release         │ read error: release
        ▼                       ▼                       ▼
    waiting_for_submit_slot   waiting_for_capacity    coordination_error
        │ deadline              │ deadline
        ▼                       ▼
    submit_slot_timeout       capacity_timeout

Deadlines use the monotonic ``now`` the driver passes in. The submit-slot wait
is measured from the first busy answer and restarts once the Lease is won (a
win is progress); the capacity wait is measured from the first full census
and keeps running across the Lease re-acquisitions in between. A deadline is
checked on the attempt made when it falls due, so the last look is never
skipped; a zero deadline means "try once".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from elbgate.settings import ClientSettings, GateSettings

DEFAULT_POLL_SECONDS = 5.0


class Phase(StrEnum):
    """Where a submit stands; the values are what callers display."""

    ACQUIRING = "acquiring"
    WAITING_FOR_SUBMIT_SLOT = "waiting_for_submit_slot"
    CHECKING_CAPACITY = "checking_capacity"
    WAITING_FOR_CAPACITY = "waiting_for_capacity"
    READY = "ready"
    SUBMIT_SLOT_TIMEOUT = "submit_slot_timeout"
    CAPACITY_TIMEOUT = "capacity_timeout"
    COORDINATION_ERROR = "coordination_error"
    CANCELLED = "cancelled"
    RELEASED = "released"
    """Reported by the driver after the submit ran; never produced by ``transition``."""


TERMINAL: frozenset[Phase] = frozenset(
    {
        Phase.READY,
        Phase.SUBMIT_SLOT_TIMEOUT,
        Phase.CAPACITY_TIMEOUT,
        Phase.COORDINATION_ERROR,
        Phase.CANCELLED,
        Phase.RELEASED,
    }
)
_ACQUIRING: frozenset[Phase] = frozenset(
    {Phase.ACQUIRING, Phase.WAITING_FOR_SUBMIT_SLOT, Phase.WAITING_FOR_CAPACITY}
)


class Action(StrEnum):
    ACQUIRE = "acquire"
    TAKE_CENSUS = "take_census"
    PROCEED = "proceed"
    FAIL = "fail"


# --- observations ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseAcquired:
    pass


@dataclass(frozen=True, slots=True)
class HeldElsewhere:
    """The acquire found the Lease held by another submit (what :class:`client.LeaseBusy`
    is raised for outside the machine)."""

    detail: str
    """Who holds it and until when."""


@dataclass(frozen=True, slots=True)
class CensusTaken:
    active_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ApiFailed:
    detail: str


@dataclass(frozen=True, slots=True)
class Cancelled:
    pass


Observation = LeaseAcquired | HeldElsewhere | CensusTaken | ApiFailed | Cancelled


# --- state, limits, step -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotLimits:
    """The numbers the machine needs, taken from the gate and client settings."""

    ceiling: int
    slot_wait_max_seconds: float
    capacity_wait_max_seconds: float
    poll_seconds: float = DEFAULT_POLL_SECONDS

    @classmethod
    def from_settings(
        cls,
        gate: GateSettings,
        client: ClientSettings,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
    ) -> SlotLimits:
        return cls(
            ceiling=gate.max_run_concurrency,
            slot_wait_max_seconds=client.submit_slot_wait_max_seconds,
            capacity_wait_max_seconds=client.capacity_wait_max_seconds,
            poll_seconds=poll_seconds,
        )


@dataclass(frozen=True, slots=True)
class SlotState:
    phase: Phase = Phase.ACQUIRING
    slot_wait_since: float | None = None
    """Monotonic time of the first busy answer of the current Lease wait."""
    capacity_wait_since: float | None = None
    """Monotonic time of the first full census."""
    detail: str = ""
    """What the last observation said, for display."""


@dataclass(frozen=True, slots=True)
class Step:
    state: SlotState
    action: Action
    sleep: float = 0.0
    """Seconds to wait before ``action``."""
    release: bool = False
    """Make sure the Lease is not held (conditional release) before ``action``."""
    deadline_in: float | None = None
    """While waiting: seconds until the wait's deadline. A driver that wakes on events
    rather than after ``sleep`` must still be back by then (the last look)."""


def transition(state: SlotState, obs: Observation, now: float, limits: SlotLimits) -> Step:
    """The next state and what to do, given what the last action observed."""
    phase = state.phase
    if phase in TERMINAL:
        raise ValueError(f"no transition out of terminal phase {phase}")
    if isinstance(obs, Cancelled):
        return Step(replace(state, phase=Phase.CANCELLED, detail="cancelled"), Action.FAIL, 0, True)

    if phase in _ACQUIRING:
        if isinstance(obs, LeaseAcquired):
            nxt = replace(
                state, phase=Phase.CHECKING_CAPACITY, slot_wait_since=None, detail="Lease held"
            )
            return Step(nxt, Action.TAKE_CENSUS)
        if isinstance(obs, HeldElsewhere):
            since = now if state.slot_wait_since is None else state.slot_wait_since
            left = since + limits.slot_wait_max_seconds - now
            if left <= 0:
                nxt = replace(
                    state, phase=Phase.SUBMIT_SLOT_TIMEOUT, slot_wait_since=since, detail=obs.detail
                )
                return Step(nxt, Action.FAIL)
            nxt = replace(
                state, phase=Phase.WAITING_FOR_SUBMIT_SLOT, slot_wait_since=since, detail=obs.detail
            )
            return Step(nxt, Action.ACQUIRE, sleep=min(limits.poll_seconds, left), deadline_in=left)
        if isinstance(obs, ApiFailed):
            # A write whose answer was lost may have taken the Lease: make sure it is not held.
            nxt = replace(state, phase=Phase.COORDINATION_ERROR, detail=obs.detail)
            return Step(nxt, Action.FAIL, release=True)

    if phase is Phase.CHECKING_CAPACITY:
        if isinstance(obs, CensusTaken):
            shown = f"{len(obs.active_ids)}/{limits.ceiling} active"
            if obs.active_ids:
                shown += ": " + ", ".join(obs.active_ids)
            if len(obs.active_ids) < limits.ceiling:
                return Step(replace(state, phase=Phase.READY, detail=shown), Action.PROCEED)
            since = now if state.capacity_wait_since is None else state.capacity_wait_since
            left = since + limits.capacity_wait_max_seconds - now
            if left <= 0:
                nxt = replace(
                    state, phase=Phase.CAPACITY_TIMEOUT, capacity_wait_since=since, detail=shown
                )
                return Step(nxt, Action.FAIL, release=True)
            nxt = replace(
                state, phase=Phase.WAITING_FOR_CAPACITY, capacity_wait_since=since, detail=shown
            )
            # The Lease is released while waiting, so other submit paths are not blocked.
            return Step(
                nxt,
                Action.ACQUIRE,
                sleep=min(limits.poll_seconds, left),
                release=True,
                deadline_in=left,
            )
        if isinstance(obs, ApiFailed):
            # Fail closed: a census that cannot be read is not an empty namespace.
            nxt = replace(state, phase=Phase.COORDINATION_ERROR, detail=obs.detail)
            return Step(nxt, Action.FAIL, release=True)

    raise ValueError(f"unexpected {type(obs).__name__} in phase {phase}")
