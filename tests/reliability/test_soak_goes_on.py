"""A soak records a run its harness could not finish and goes on with the others.

A 1,000-run soak takes hours; one wait that times out (a client that never got the
Lease, a watch that lagged) must not end it with nothing written. The run is listed in
RESULTS.md, left out of every figure, and makes the exit status non-zero.
"""

from __future__ import annotations

import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any, cast

import pytest

from testbed.reliability import soak
from testbed.reliability.histories import History
from testbed.reliability.ledger import LEDGER
from testbed.reliability.races import CONTROLLER_KINDS, KINDS, Plan, run_all
from testbed.reliability.scheduler import Runner, ScheduleResult

SEEDS = [s for s in range(1, 25) if KINDS[s % len(KINDS)] not in CONTROLLER_KINDS][:8]
"""Seeds of the kinds that run with the controller up (no outage to stage)."""
BROKEN = SEEDS[2]
TIMED_OUT = "timed out after 60s waiting for bob to take the expired hold over"


class Races:
    """Stands in for :class:`testbed.reliability.races.Races`: one plan's harness fails."""

    rig = None  # no outage kinds among SEEDS: the controller is never stopped

    def __init__(self) -> None:
        self.ran: list[int] = []
        self._lock = threading.Lock()

    def run(self, p: Plan, slot: str) -> History:
        with self._lock:
            self.ran.append(p.seed)
        if p.seed == BROKEN:
            raise AssertionError(TIMED_OUT)
        return History(f"{p.kind}-{p.seed}", p.kind, {}, slot)


def test_a_history_the_harness_could_not_finish_is_handed_over_and_the_rest_run() -> None:
    races, failed = Races(), []
    out = run_all(
        cast(Any, races), SEEDS, ["a", "b"], on_error=lambda p, exc: failed.append((p, exc))
    )
    assert sorted(races.ran) == sorted(SEEDS)
    assert sorted(int(h.name.rsplit("-", 1)[1]) for h in out) == sorted(set(SEEDS) - {BROKEN})
    assert [(p.seed, str(exc)) for p, exc in failed] == [(BROKEN, TIMED_OUT)]


def test_without_a_handler_the_harness_error_is_raised_after_the_others_ran() -> None:
    races = Races()
    with pytest.raises(AssertionError, match="waiting for bob"):
        run_all(cast(Any, races), SEEDS, ["a", "b"])
    assert sorted(races.ran) == sorted(SEEDS)


def _runner(fail: int) -> Runner:
    runner = Runner.__new__(Runner)  # no rig: only the pool and the error path run
    runner.rig = SimpleNamespace(namespaces=["a", "b"])  # type: ignore[assignment]

    def run(seed: int, ns: str) -> ScheduleResult:
        if seed == fail:
            raise AssertionError(TIMED_OUT)
        return ScheduleResult(seed, ns, 1, Counter())

    runner.run = run  # type: ignore[method-assign]
    return runner


def test_a_schedule_the_harness_could_not_finish_is_handed_over_and_the_rest_yield() -> None:
    failed: list[tuple[int, str]] = []
    done = list(
        _runner(fail=3).run_each(
            range(1, 7), 2, on_error=lambda seed, exc: failed.append((seed, str(exc)))
        )
    )
    assert sorted(r.seed for r in done) == [1, 2, 4, 5, 6]
    assert failed == [(3, TIMED_OUT)]
    with pytest.raises(AssertionError, match="waiting for bob"):
        list(_runner(fail=3).run_each(range(1, 7), 2))


def test_the_soak_lists_the_unfinished_run_and_counts_it_toward_the_end(tmp_path) -> None:
    run = _soak(tmp_path, 2)
    try:
        raise AssertionError(TIMED_OUT)
    except AssertionError as exc:
        run.harness_error("schedule 2", exc)
    run.write()
    text = (tmp_path / "RESULTS.md").read_text()
    section = text.split("## Runs the harness could not finish", 1)[1]
    assert "- schedule 2: AssertionError at test_soak_goes_on.py:" in section
    assert section.split("\n- schedule 2: ", 1)[1].split(": ", 1)[1].startswith(TIMED_OUT)
    assert "(and 1 the harness could not finish)" in text
    assert run.unfinished_count("schedule ") == 1 and run.unfinished_count("history ") == 0


def _soak(tmp_path, schedules: int) -> soak.Soak:
    """A soak of ``schedules`` schedules and nothing else, writing under ``tmp_path``."""
    no_more = ["--histories", "0", "--fault-trials", "0", "--storms", "0"]
    results = ["--results", str(tmp_path / "RESULTS.md")]
    run = soak.Soak(soak.parse(["--schedules", str(schedules), *no_more, *results]))
    run.control_plane = "Kubernetes test"
    return run


def test_a_run_without_schedules_reports_no_schedule_figures(tmp_path) -> None:
    """Histories only (``--schedules 0``): no zeros that read as outcomes."""
    _soak(tmp_path, 0).write()
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## The oracle's figures" not in text and "| searches ran |" not in text
    assert "## Failure modes" not in text and "| promise |" not in text
    assert "## Randomized schedules\n\nNot run (`--schedules 0`)" in text
    assert "## Violations\n\nNone." in text


def test_a_run_with_schedules_keeps_the_oracle_figures(tmp_path) -> None:
    theirs = "a promise this test session checked"
    LEDGER.record(theirs, runs=1)
    try:
        run = _soak(tmp_path, 2)
        run.done.append(ScheduleResult(1, "a", 1, Counter()))
        run.write()
        # The session's ledger (printed when the tests end) keeps its rows, and the
        # soak's RESULTS.md holds only the soak's own.
        assert theirs in LEDGER.rows and theirs not in run.ledger.rows
    finally:
        LEDGER.rows.pop(theirs, None)
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## The oracle's figures" in text and "## Failure modes" in text
    assert run.ledger.rows and theirs not in text
    assert "## Randomized schedules\n\nNot run" not in text


def test_a_history_during_which_the_job_watch_lost_events_is_not_checked() -> None:
    from testbed.api import Resource
    from testbed.reliability.histories import JobWatch
    from testbed.reliability.races import Races as RealRaces

    jobs = Resource("/apis/batch/v1", "jobs", "Job", namespaced=True)
    watch = JobWatch(cast(Any, SimpleNamespace(resource=lambda _: jobs)), ["a", "b"])  # not started
    watch.forget("a")
    watch.gaps.append("jobs watch: 410 Gone at 1234")  # what the watch reports on a gap
    watch.forget("b")  # b's history began after the gap: it sees every event
    races = SimpleNamespace(watch=watch, cp=None)
    with pytest.raises(RuntimeError, match=r"Job watch lost events \(jobs watch: 410 Gone"):
        RealRaces.record(cast(Any, races), History("solo-1", "solo", {}, "a"))
    assert watch.lost("b") == []
