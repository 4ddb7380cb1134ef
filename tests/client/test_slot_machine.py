"""The submit-slot state machine as tables: (state, observation, now) → step."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from client.slot_machine import (
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
from elbgate.settings import Settings

LIMITS = SlotLimits(
    ceiling=3, slot_wait_max_seconds=60, capacity_wait_max_seconds=120, poll_seconds=5
)


def state(phase: Phase, slot: float | None = None, cap: float | None = None) -> SlotState:
    return SlotState(phase=phase, slot_wait_since=slot, capacity_wait_since=cap)


def busy() -> HeldElsewhere:
    return HeldElsewhere("held by dashboard-1 until later")


def searches(n: int) -> CensusTaken:
    return CensusTaken(tuple(f"s{i}" for i in range(n)))


@dataclass(frozen=True)
class Case:
    name: str
    state: SlotState
    obs: Observation
    now: float
    phase: Phase
    action: Action
    sleep: float = 0.0
    release: bool = False
    slot_since: float | None = None
    cap_since: float | None = None
    limits: SlotLimits = LIMITS


# fmt: off
CASES = [
    Case("a won lease goes to the census", state(Phase.ACQUIRING), LeaseAcquired(), 100,
         Phase.CHECKING_CAPACITY, Action.TAKE_CENSUS),
    Case("a first busy answer starts the slot wait and polls", state(Phase.ACQUIRING), busy(),
         100, Phase.WAITING_FOR_SUBMIT_SLOT, Action.ACQUIRE, sleep=5, slot_since=100),
    Case("the last poll before the slot deadline is shortened to it",
         state(Phase.WAITING_FOR_SUBMIT_SLOT, slot=100), busy(), 157,
         Phase.WAITING_FOR_SUBMIT_SLOT, Action.ACQUIRE, sleep=3, slot_since=100),
    Case("busy at the slot deadline times out without a release",
         state(Phase.WAITING_FOR_SUBMIT_SLOT, slot=100), busy(), 160,
         Phase.SUBMIT_SLOT_TIMEOUT, Action.FAIL, slot_since=100),
    Case("a zero slot wait means one try", state(Phase.ACQUIRING), busy(), 100,
         Phase.SUBMIT_SLOT_TIMEOUT, Action.FAIL, slot_since=100,
         limits=SlotLimits(3, 0, 120, 5)),
    Case("an API failure while acquiring is an error, never busy", state(Phase.ACQUIRING),
         ApiFailed("503"), 100, Phase.COORDINATION_ERROR, Action.FAIL, release=True),
    Case("a won lease ends the slot wait", state(Phase.WAITING_FOR_SUBMIT_SLOT, slot=100),
         LeaseAcquired(), 130, Phase.CHECKING_CAPACITY, Action.TAKE_CENSUS),
    Case("room under the ceiling proceeds", state(Phase.CHECKING_CAPACITY), searches(2), 100,
         Phase.READY, Action.PROCEED),
    Case("an empty namespace proceeds", state(Phase.CHECKING_CAPACITY), searches(0), 100,
         Phase.READY, Action.PROCEED),
    Case("a full namespace releases the lease and waits", state(Phase.CHECKING_CAPACITY),
         searches(3), 100, Phase.WAITING_FOR_CAPACITY, Action.ACQUIRE, sleep=5, release=True,
         cap_since=100),
    Case("over the ceiling is full too", state(Phase.CHECKING_CAPACITY), searches(5), 100,
         Phase.WAITING_FOR_CAPACITY, Action.ACQUIRE, sleep=5, release=True, cap_since=100),
    Case("the capacity wait keeps its start across re-acquisitions",
         state(Phase.CHECKING_CAPACITY, cap=100), searches(3), 217,
         Phase.WAITING_FOR_CAPACITY, Action.ACQUIRE, sleep=3, release=True, cap_since=100),
    Case("full at the capacity deadline times out and releases",
         state(Phase.CHECKING_CAPACITY, cap=100), searches(3), 220,
         Phase.CAPACITY_TIMEOUT, Action.FAIL, release=True, cap_since=100),
    Case("room after a capacity wait proceeds", state(Phase.CHECKING_CAPACITY, cap=100),
         searches(2), 219, Phase.READY, Action.PROCEED, cap_since=100),
    Case("a census read error fails closed and releases", state(Phase.CHECKING_CAPACITY),
         ApiFailed("500"), 100, Phase.COORDINATION_ERROR, Action.FAIL, release=True),
    Case("busy after a capacity wait waits for the slot, keeping the capacity start",
         state(Phase.WAITING_FOR_CAPACITY, cap=100), busy(), 150,
         Phase.WAITING_FOR_SUBMIT_SLOT, Action.ACQUIRE, sleep=5, slot_since=150, cap_since=100),
    Case("a won lease after a capacity wait takes the census again",
         state(Phase.WAITING_FOR_CAPACITY, cap=100), LeaseAcquired(), 150,
         Phase.CHECKING_CAPACITY, Action.TAKE_CENSUS, cap_since=100),
    Case("cancel while waiting for the slot stops and makes sure nothing is held",
         state(Phase.WAITING_FOR_SUBMIT_SLOT, slot=100), Cancelled(), 110, Phase.CANCELLED,
         Action.FAIL, release=True, slot_since=100),
    Case("cancel under the lease releases it", state(Phase.CHECKING_CAPACITY), Cancelled(), 110,
         Phase.CANCELLED, Action.FAIL, release=True),
]
# fmt: on


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_transition(case: Case) -> None:
    step = transition(case.state, case.obs, case.now, case.limits)
    assert (step.state.phase, step.action, step.sleep, step.release) == (
        case.phase,
        case.action,
        case.sleep,
        case.release,
    )
    assert step.state.slot_wait_since == case.slot_since
    assert step.state.capacity_wait_since == case.cap_since


def test_census_detail_names_the_count_ceiling_and_active_ids() -> None:
    step = transition(state(Phase.CHECKING_CAPACITY), searches(3), 0, LIMITS)
    assert step.state.detail == "3/3 active: s0, s1, s2"


def test_busy_detail_is_carried_for_display() -> None:
    step = transition(state(Phase.ACQUIRING), busy(), 0, LIMITS)
    assert step.state.detail == "held by dashboard-1 until later"


@pytest.mark.parametrize(
    "phase", [Phase.READY, Phase.CAPACITY_TIMEOUT, Phase.SUBMIT_SLOT_TIMEOUT, Phase.CANCELLED]
)
def test_terminal_phases_have_no_transition(phase: Phase) -> None:
    with pytest.raises(ValueError, match="terminal"):
        transition(state(phase), LeaseAcquired(), 0, LIMITS)


@pytest.mark.parametrize(
    ("phase", "obs"),
    [(Phase.ACQUIRING, searches(1)), (Phase.CHECKING_CAPACITY, LeaseAcquired())],
)
def test_an_observation_that_cannot_happen_in_a_phase_is_a_bug(
    phase: Phase, obs: Observation
) -> None:
    with pytest.raises(ValueError, match="unexpected"):
        transition(state(phase), obs, 0, LIMITS)


def test_limits_come_from_the_settings_the_submit_paths_share() -> None:
    settings = Settings.from_env(
        {
            "BLAST_MAX_RUN_CONCURRENCY": "4",
            "BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS": "90",
            "BLAST_CAPACITY_WAIT_MAX_SECONDS": "600",
        }
    )
    assert SlotLimits.from_settings(settings.gate, settings.client, poll_seconds=2) == SlotLimits(
        4, 90, 600, 2
    )


@pytest.mark.parametrize(
    ("state_", "obs", "now", "deadline_in"),
    [
        pytest.param(state(Phase.ACQUIRING), busy(), 100, 60, id="a slot wait has 60 s to go"),
        pytest.param(
            state(Phase.WAITING_FOR_SUBMIT_SLOT, slot=100), busy(), 157, 3, id="3 s to go"
        ),
        pytest.param(state(Phase.CHECKING_CAPACITY), searches(3), 100, 120, id="capacity wait"),
        pytest.param(state(Phase.CHECKING_CAPACITY), searches(1), 100, None, id="no wait"),
    ],
)
def test_a_wait_says_when_its_deadline_falls_so_a_watcher_is_back_in_time(
    state_: SlotState, obs: Observation, now: float, deadline_in: float | None
) -> None:
    assert transition(state_, obs, now, LIMITS).deadline_in == deadline_in
