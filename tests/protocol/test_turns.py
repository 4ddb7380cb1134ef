"""The fair-turn rule (:func:`elbgate.turns.judge`), case by case, and its record."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from elbgate.turns import Held, TurnRecord, TurnRules, UnreadableTurns, Waiting, judge

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
RULES = TurnRules(hold_seconds=45, forget_seconds=300)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def record(held: Held | None = None, **paths: tuple[float, float]) -> TurnRecord:
    return TurnRecord(
        "blast", {p: Waiting(at(s), at(seen)) for p, (s, seen) in paths.items()}, held, "7"
    )


def test_a_capacity_poll_is_refused_as_busy_and_puts_the_path_in_the_line() -> None:
    judged = judge(TurnRecord("blast"), "dashboard", at(0), False, RULES)
    assert not judged.allowed and judged.reason == "no_slot" and judged.favoured == ""
    assert judged.write is not None
    assert judged.write.paths == {"dashboard": Waiting(at(0), at(0))}


def test_a_capacity_poll_keeps_the_first_wait_and_writes_seen_only_when_stale() -> None:
    before = record(dashboard=(0, 0))
    assert judge(before, "dashboard", at(5), False, RULES).write is None
    later = judge(before, "dashboard", at(30), False, RULES).write
    assert later is not None and later.paths["dashboard"] == Waiting(at(0), at(30))


def test_a_free_turn_goes_to_the_only_path_trying_and_serves_it() -> None:
    judged = judge(record(openapi=(0, 0)), "openapi", at(10), True, RULES)
    assert judged.allowed and judged.reason == "served"
    assert judged.write is not None and judged.write.paths == {}


def test_a_free_turn_is_kept_for_the_path_that_waited_longer() -> None:
    judged = judge(record(dashboard=(0, 0)), "openapi", at(10), True, RULES)
    assert not judged.allowed and judged.reason == "kept_for_other"
    assert judged.favoured == "dashboard" and judged.favoured_since == at(0)
    assert judged.write is not None
    assert judged.write.held == Held("dashboard", at(10))
    assert judged.write.paths["openapi"] == Waiting(at(10), at(10))


def test_the_path_the_turn_is_kept_for_takes_it() -> None:
    kept = record(Held("dashboard", at(10)), dashboard=(0, 0), openapi=(10, 10))
    judged = judge(kept, "dashboard", at(30), True, RULES)
    assert judged.allowed and judged.reason == "served"
    assert judged.write is not None
    assert judged.write.held is None and set(judged.write.paths) == {"openapi"}


def test_a_kept_turn_lapses_after_the_hold_and_the_path_loses_its_place() -> None:
    kept = record(Held("dashboard", at(10)), dashboard=(0, 0), openapi=(10, 50))
    assert not judge(kept, "openapi", at(54), True, RULES).allowed
    judged = judge(kept, "openapi", at(55), True, RULES)
    assert judged.allowed and judged.reason == "served_after_lapse"
    assert judged.write is not None
    assert judged.write.paths == {} and judged.write.held is None


def test_a_path_not_seen_for_the_forget_time_no_longer_waits() -> None:
    old = record(dashboard=(0, 0))
    assert not judge(old, "openapi", at(299), True, RULES).allowed
    assert judge(old, "openapi", at(300), True, RULES).allowed


def test_at_the_ceiling_no_turn_is_kept() -> None:
    kept = record(Held("dashboard", at(10)), dashboard=(0, 0), openapi=(10, 10))
    judged = judge(kept, "openapi", at(20), False, RULES)
    assert not judged.allowed and judged.write is not None and judged.write.held is None


def test_ties_go_by_path_name() -> None:
    both = record(dashboard=(0, 0), openapi=(0, 0))
    assert judge(both, "dashboard", at(1), True, RULES).allowed
    assert not judge(both, "openapi", at(1), True, RULES).allowed


def test_the_record_round_trips_through_its_configmap() -> None:
    kept = replace(
        record(Held("dashboard", at(10)), dashboard=(0, 0), openapi=(10, 10)),
        granted=Held("openapi", at(5)),
        granted_over="41",
    )
    body = kept.body()
    assert body["metadata"] == {
        "name": "elb-gate-turns",
        "namespace": "blast",
        "resourceVersion": "7",
    }
    assert TurnRecord.from_configmap("blast", body) == kept
    assert TurnRecord.from_configmap("blast", None) == TurnRecord("blast")


@pytest.mark.parametrize(
    "data",
    ["not json", '{"paths": []}', '{"paths": {"a": {"since": "x", "seen": "y"}}}'],
)
def test_a_record_not_written_by_elb_gate_is_unreadable(data: str) -> None:
    with pytest.raises(UnreadableTurns):
        TurnRecord.from_configmap("blast", {"data": {"waiting.json": data}})


def test_writes_racing_for_a_turn_just_given_put_their_path_back_in_the_line() -> None:
    # Five dashboard tasks read the free Lease (resourceVersion 41) on one beat and write
    # it together: the first is served; the others replace the same stored Lease, so
    # they race for that turn (the API server stores one) and wait behind openapi.
    first = judge(TurnRecord("blast"), "dashboard", at(0), True, RULES, "41")
    assert first.allowed and first.write is not None
    assert first.write.granted == Held("dashboard", at(0))
    assert first.write.granted_over == "41"
    line = replace(first.write, paths={"openapi": Waiting(at(0.5), at(0.5))})
    second = judge(line, "dashboard", at(0.6), True, RULES, "41")
    assert second.allowed and second.reason == "just_granted"
    assert second.write is not None
    assert second.write.paths["dashboard"] == Waiting(at(0.6), at(0.6))
    # A write over a later version of the Lease asks for a new turn: openapi's.
    assert not judge(second.write, "dashboard", at(2), True, RULES, "44").allowed
    assert judge(second.write, "openapi", at(2), True, RULES, "44").allowed
