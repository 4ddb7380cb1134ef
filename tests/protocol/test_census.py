"""The census table: every rule of DESIGN.md "Census", one row each."""

from __future__ import annotations

import pytest

from elbgate.census import census, is_terminal
from tests.protocol.builders import NOW, job

GRACE = 300


@pytest.mark.parametrize(
    ("status", "terminal"),
    [
        ({}, False),
        ({"active": 1}, False),
        ({"succeeded": 1}, True),
        ({"succeeded": 0}, False),
        ({"completionTime": "2026-11-29T11:00:00Z"}, True),
        ({"failed": 3}, False),  # a bare failed > 0 is still active: the Job may retry
        ({"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}, True),
        ({"conditions": [{"type": "Complete", "status": "True"}]}, True),
        ({"conditions": [{"type": "Complete", "status": "False"}]}, False),
        ({"conditions": [{"type": "Suspended", "status": "True"}]}, False),
        ({"conditions": ["garbage", {"type": "Failed"}]}, False),
        ({"succeeded": "1"}, False),  # wrongly typed counts are not proof of completion
    ],
)
def test_terminal_test_matches_the_existing_clients(status: dict, terminal: bool) -> None:
    assert is_terminal({"status": status}) is terminal


CASES = [
    # (description, jobs, active ids, orphan names)
    ("an empty namespace has no active search", [], [], []),
    (
        "an unfinished batch job makes its search active",
        [job("blast", "a")],
        ["a"],
        [],
    ),
    (
        "an unfinished submit job makes its search active",
        [job("submit", "a")],
        ["a"],
        [],
    ),
    (
        "jobs of one search count once",
        [
            job("submit", "a"),
            job("blast", "a", "b1"),
            job("blast", "a", "b2"),
            job("finalizer", "a"),
        ],
        ["a"],
        [],
    ),
    (
        "completed jobs do not count",
        [job("blast", "a").complete(), job("finalizer", "a").complete()],
        [],
        [],
    ),
    (
        "completionTime alone makes a job terminal",
        [job("blast", "a").with_status(completionTime="2026-11-29T11:00:00Z")],
        [],
        [],
    ),
    (
        "a batch job that failed but may retry is still active",
        [job("blast", "a").failed_but_retrying()],
        ["a"],
        [],
    ),
    (
        "a batch job with a Failed condition is terminal",
        [job("blast", "a").failed_condition()],
        [],
        [],
    ),
    (
        "a finalizer with unfinished companions is live whatever its age",
        [job("finalizer", "a").aged(10_000), job("blast", "a")],
        ["a"],
        [],
    ),
    (
        "a lone finalizer younger than the grace is an active search",
        [job("finalizer", "a").aged(GRACE - 1)],
        ["a"],
        [],
    ),
    (
        "a lone finalizer at the grace is an orphan holding no slot",
        [job("finalizer", "a").aged(GRACE)],
        [],
        ["finalizer-a"],
    ),
    (
        "a lone finalizer older than the grace is an orphan",
        [job("finalizer", "a").aged(GRACE * 10)],
        [],
        ["finalizer-a"],
    ),
    (
        "a finalizer whose batch work is done holds no slot and is no orphan (it is merging)",
        [job("finalizer", "a").aged(GRACE + 5), job("blast", "a").complete()],
        [],
        [],
    ),
    (
        "a finalizer whose batch work failed for good holds no slot and is no orphan",
        [job("finalizer", "a").aged(GRACE + 5), job("submit", "a").failed_condition()],
        [],
        [],
    ),
    (
        "another search's finished batch work does not save an orphan",
        [job("finalizer", "a").aged(GRACE + 5), job("blast", "b").complete()],
        [],
        ["finalizer-a"],
    ),
    (
        "a lone finalizer of unknown age is live",
        [job("finalizer", "a").aged(None)],
        ["a"],
        [],
    ),
    (
        "a finalizer with an unparseable creation time is live",
        [job("finalizer", "a").created("not-a-time")],
        ["a"],
        [],
    ),
    (
        "an unlabelled finalizer counts as its own search",
        [job("finalizer", None, "elb-finalizer-1"), job("finalizer", None, "elb-finalizer-2")],
        ["finalizer/elb-finalizer-1", "finalizer/elb-finalizer-2"],
        [],
    ),
    (
        "an old unlabelled finalizer is an orphan",
        [job("finalizer", None, "elb-finalizer-1").aged(GRACE + 1)],
        [],
        ["elb-finalizer-1"],
    ),
    (
        "an unlabelled batch job counts as its own search",
        [job("blast", None, "stray")],
        ["blast/stray"],
        [],
    ),
    (
        "jobs of other apps are ignored",
        [job("elb-db-warmup", "a"), job("web", "b")],
        [],
        [],
    ),
    (
        "three searches are three",
        [job("blast", "a"), job("submit", "b"), job("finalizer", "c")],
        ["a", "b", "c"],
        [],
    ),
]


@pytest.mark.parametrize(("case", "jobs", "active", "orphans"), CASES, ids=[c[0] for c in CASES])
def test_census(case: str, jobs: list, active: list[str], orphans: list[str]) -> None:
    result = census([j.build() for j in jobs], NOW, GRACE)
    assert list(result.active_ids) == active
    assert result.count == len(active)
    assert [o.name for o in result.orphans] == orphans


def test_each_active_search_says_why_it_counts() -> None:
    result = census([job("blast", "a").build(), job("finalizer", "b").aged(20).build()], NOW, GRACE)
    reasons = {s.key: s.reason for s in result.active}
    assert "blast/blast-a" in reasons["a"]
    assert reasons["b"] == "finalizer finalizer-b live (20s old < 5m0s grace)"


def test_orphans_carry_what_the_controller_needs_to_act_safely() -> None:
    raw = job("finalizer", "a").aged(GRACE + 1).build()
    raw["metadata"].update(
        uid="u-1",
        resourceVersion="42",
        annotations={"elb-gate.io/orphaned-since": "2026-11-29T11:00:00Z"},
    )
    (orphan,) = census([raw], NOW, GRACE).orphans
    assert (orphan.uid, orphan.resource_version, orphan.job_id) == ("u-1", "42", "a")
    assert orphan.orphaned_since == "2026-11-29T11:00:00Z"


def test_is_active_answers_for_one_id() -> None:
    result = census([job("blast", "a").build()], NOW, GRACE)
    assert result.is_active("a")
    assert not result.is_active("b")


def test_a_finalizer_merging_after_its_batch_work_is_finishing_not_orphaned() -> None:
    jobs = [job("finalizer", "a").aged(GRACE * 20).build(), job("blast", "a").complete().build()]
    result = census(jobs, NOW, GRACE)
    assert [r.name for r in result.finishing] == ["finalizer-a"]
    assert result.orphans == ()
    assert result.count == 0


def test_batch_work_known_only_by_id_makes_a_finalizer_finishing() -> None:
    # The controller's cache keeps the ids of finished batch work, not the Jobs.
    lone = [job("finalizer", "a").aged(GRACE + 1).build()]
    assert [r.name for r in census(lone, NOW, GRACE).orphans] == ["finalizer-a"]
    result = census(lone, NOW, GRACE, batch_work_ids={"a"})
    assert ([r.name for r in result.finishing], result.orphans) == (["finalizer-a"], ())
