"""Promise 1: never over-admit, never two holders — randomized schedules on the real
control plane, judged by code that shares nothing with elb-gate.

N submitters (2..12) mixing elb-gate's library, the elb-gate CLI, the dashboard's raw
HTTP path and the OpenAPI service's kubectl path race against two webhook replicas
behind one Service and the controller. Their Jobs really run, fail, are retried and
TTL-deleted by the Job and TTL controllers; submitters die in every way the holder-gone
rule tells apart. After every Job write the observer counts with its own oracle and
with the census; at the end, Gate A is judged from the API server's audit log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.controlplane import ControlPlane
from testbed.reliability.ledger import LEDGER
from testbed.reliability.rig import CEILING, CONTROLLER_ENV, Rig
from testbed.reliability.scheduler import Runner, ScheduleResult
from testbed.reliability.schedules import CI_SEEDS, NAMESPACE_SLOTS, draw
from testbed.reliability.submitters import POD_DEATHS
from testbed.reliability.summary import summarize

# The module fixture plays every CI schedule before the first test: several minutes on a
# loaded 2-core machine, past the 300 s per-test bound in pyproject.toml.
pytestmark = [pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def rig(control_plane: ControlPlane) -> Iterator[Rig]:
    """Two webhook replicas behind a Service and a controller, for every schedule."""
    slots = [control_plane.new_namespace("race") for _ in range(NAMESPACE_SLOTS)]
    with Rig(control_plane, slots, controller_env=CONTROLLER_ENV) as started:
        started.wait_until_ready()
        yield started


@pytest.fixture(scope="module")
def results(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> list[ScheduleResult]:
    """Every CI seed's schedule, run once for the module's assertions."""
    runner = Runner(rig, Path(tmp_path_factory.mktemp("schedules")))
    try:
        done = list(runner.run_each(CI_SEEDS, parallel=NAMESPACE_SLOTS))
    finally:
        runner.close()
    summarize(done, LEDGER, rig.admissions_served())
    return done


def test_the_schedules_ran_with_every_path_and_size(results: list[ScheduleResult]) -> None:
    assert len(results) == len(CI_SEEDS)
    assert set().union(*(r.protocols for r in results)) == {"client", "cli", "dashboard", "openapi"}
    assert {r.submitters for r in results} >= {2, 9}


def test_no_schedule_shows_any_violation(results: list[ScheduleResult]) -> None:
    found = [f"schedule {r.seed}: {v}" for r in results for v in r.violations]
    assert not found, "\n".join(found)


def test_the_census_never_disagrees_with_the_oracle(results: list[ScheduleResult]) -> None:
    assert sum(r.job_events for r in results) > 500  # it was asked after every Job write
    assert {r.seed: r.disagreement_texts for r in results if r.disagreements} == {}


def test_active_searches_never_exceed_the_ceiling_and_reach_it(
    results: list[ScheduleResult],
) -> None:
    assert max(r.max_active for r in results) == CEILING
    # the crude bound is never below the oracle, and it does see more (finished work)
    assert all(r.max_crude >= r.max_active for r in results)


def test_gate_a_was_judged_on_every_search_and_there_were_never_two_holders(
    results: list[ScheduleResult],
) -> None:
    for r in results:
        assert r.gate_a_checked >= r.searches_ran, r.seed
    assert max(r.max_live_holders for r in results) == 1
    assert sum(r.takeovers for r in results) > 0  # expired holds were taken over


def test_a_stalled_hold_ends_at_expiry_and_its_holder_is_refused_when_it_wakes(
    results: list[ScheduleResult],
) -> None:
    """Each schedule with a library submitter that does not die has one stall: a
    dashboard takes the hold over once expired, or the controller clears it at expiry;
    the woken holder's next Job CREATE is refused, unless a sibling replica with the
    same user holds the Lease by then (each judged per schedule)."""
    planned = Counter(str(p.stall) for seed in CI_SEEDS for p in draw(seed) if p.stall)
    ended = sum((r.stalls for r in results), Counter[str]())
    assert set(planned) == {"taken_over", "left_alone"}
    assert ended["taken_over:expired_takeover"] > 0 and ended["left_alone:expired"] > 0
    woke = sum(r.stalls_refused + r.stalls_admitted_by_sibling for r in results)
    assert sum(ended.values()) == woke == planned.total()
    assert sum(r.stalls_refused for r in results) > 0


def test_every_search_runs_unless_its_submitter_died(results: list[ScheduleResult]) -> None:
    for r in results:
        assert r.searches_ran + r.crashes == r.submitters, (r.seed, r.violations)


def test_jobs_fail_and_are_retried_by_the_real_controllers(results: list[ScheduleResult]) -> None:
    fates = set().union(*(r.job_fates for r in results))
    assert {"blast:failed", "setup:retried", "submit:failed", "finalizer:ok"} <= fates


def test_holders_die_in_every_way_and_each_hold_ends_as_its_death_allows(
    results: list[ScheduleResult],
) -> None:
    deaths = set().union(*(r.deaths for r in results))
    assert deaths == {*POD_DEATHS, "thread_died", "process_died"}
    ended = set().union(*(r.reclaimed for r in results))
    for death in POD_DEATHS:
        assert f"{death}:dead_holder" in ended
    # unseen deaths end at expiry: taken over by a waiter, or cleared by the controller
    unseen = {e for e in ended if e.startswith(("thread_died:", "process_died:"))}
    assert unseen and unseen <= {
        f"{d}:{how}"
        for d in ("thread_died", "process_died")
        for how in ("expired", "expired_takeover")
    }


def test_searches_opened_without_the_lease_are_refused(results: list[ScheduleResult]) -> None:
    """Refused, unless a sibling replica with the same ServiceAccount held the Lease then:
    Gate A's holder is a user (docs/design.md), and the judge agreed it was in force."""
    intrusions = sum(r.intrusions for r in results)
    assert intrusions > 0
    refused = sum(r.intrusions_refused for r in results)
    assert refused + sum(r.intrusions_by_sibling for r in results) == intrusions
    assert refused > 0


def test_both_webhook_replicas_answered_admissions(rig: Rig, results: list[ScheduleResult]) -> None:
    assert all(n > 0 for n in rig.admissions_served())
