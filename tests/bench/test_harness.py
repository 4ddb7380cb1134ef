"""The benchmark harness: its statistics, table and results on synthetic data, and one
tiny end-to-end run proving it measures the real processes. No timed assertions."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.api_counts import classify, tally
from bench.cluster_load import merge_bursts
from bench.figures import all_figures, controller_figures, load_figures
from bench.handoff import Timeline, analyse
from bench.load import Measured, combined, interleaved, outcome_of, rotated
from bench.namespace_jobs import MANAGED_BY, api_body, job_status, planned_jobs
from bench.profiling import fold, package_of
from bench.report import Results, Target, format_table, markdown_table, paired
from bench.reviews import (
    job_controller_update,
    new_search_finalizer,
    other_lease_update,
    submit_lease_renew,
)
from bench.scenarios import FastWorkload, Series
from bench.stats import latency, percentile, ratio, spread
from elbgate.census import census
from testbed.controlplane import ATTACH_ENV, REPO, ControlPlane
from tests.builders import NOW
from webhook.review import AdmissionRequest

# -- statistics -------------------------------------------------------------------------

CHECKOUT = str(Path(__file__).resolve().parents[2])
"""Where this checkout lives: profiled frames of the project carry it."""


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        ([5], 99, 5),
        (list(range(1, 101)), 99, 99.01),
        (list(range(1, 101)), 0, 1),
        (list(range(1, 101)), 100, 100),
        ([3, 1, 2], 50, 2),
    ],
)
def test_percentile_interpolates_between_closest_ranks(
    values: list[float], q: float, expected: float
) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_not_a_number() -> None:
    assert math.isnan(percentile([], 50))


def test_latency_summary_is_in_milliseconds() -> None:
    summary = latency([1_000_000, 2_000_000, 3_000_000, 4_000_000])
    assert (summary.count, summary.p50_ms, summary.max_ms) == (4, 2.5, 4.0)
    assert summary.mean_ms == pytest.approx(2.5)


def test_spread_reports_median_and_range_and_ignores_missing_runs() -> None:
    s = spread([3.0, math.nan, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.runs) == (2.0, 1.0, 3.0, 3)
    assert s.relative == pytest.approx(1.0)


def test_ratio_against_a_missing_baseline_is_not_a_number() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(3.0, 0.0))
    assert math.isnan(ratio(3.0, math.nan))


# -- figures, table, results ------------------------------------------------------------


def test_ratio_is_taken_per_paired_run_then_the_median() -> None:
    fig = paired("x", "x", [10.0, 20.0, 30.0], "ms", [10.0, 10.0, 10.0], "floor")
    assert fig.ratio is not None and fig.ratio.median == 2.0
    assert (fig.ratio.low, fig.ratio.high) == (1.0, 3.0)


@pytest.mark.parametrize(
    ("target", "value", "baseline", "met"),
    [
        (Target(1.3, on="ratio"), 12.0, 10.0, True),
        (Target(1.3, on="ratio"), 14.0, 10.0, False),
        (Target(10.0), 9.0, None, True),
        (Target(600.0, at_most=False), 599.0, None, False),
        (Target(0.7, on="ratio", at_most=False), 8.0, 10.0, True),
        (Target(0.7, on="ratio"), 8.0, None, None),
    ],
)
def test_targets_judge_the_value_or_the_ratio(
    target: Target, value: float, baseline: float | None, met: bool | None
) -> None:
    fig = paired("x", "x", [value], "ms", [baseline] if baseline else None, "b", target)
    assert fig.met is met


def test_table_shows_value_baseline_ratio_target_and_a_miss() -> None:
    figs = [
        paired("a", "search p50", [13.0, 14.0], "ms", [10.0, 10.0], "floor", Target(1.3, "ratio")),
        paired("b", "rate", [700.0], "/s", target=Target(600.0, at_most=False)),
    ]
    text = format_table(figs, title="t")
    lines = text.splitlines()
    assert lines[0] == "t"
    assert lines[1].split() == ["figure", "value", "baseline", "ratio", "target", "met?"]
    search = next(line for line in lines if line.startswith("search p50"))
    assert "13.5 ms [13.0..14.0]" in search
    assert "1.35x" in search and "<= 1.3x" in search and search.endswith("NO")
    assert next(line for line in lines if line.startswith("rate")).endswith("yes")
    assert markdown_table(figs).count("\n") == 3


def test_results_document_has_no_nan_and_lists_the_missed_targets() -> None:
    figs = [
        paired("a", "a", [math.nan], "ms"),
        paired("b", "b", [5.0], "ms", target=Target(1.0)),
    ]
    doc = Results(figures=figs, machine={"cores": 2}).document()
    assert doc["figures"]["a"]["value"]["median"] is None
    assert doc["targets_missed"] == ["b"]
    orjson.dumps(doc)  # serialisable as is


def _synthetic_series() -> Series:
    s = Series()
    for run in range(3):
        s.add("noop.search.p50_ms", 0.5)
        s.add("noop.search.p99_ms", 1.0)
        s.add("noop.search.cpu_us", 300.0)
        s.add("noop.search.per_cpu_second", 3333.0)
        s.add("noop.n30.p50_ms", 0.5)
        s.add("noop.n30.p99_ms", 1.0)
        s.add("api.n30.p50_ms", 1.5)
        s.add("api.n30.p99_ms", 3.0)
        s.add("api.n30.cpu_us", 700.0)
        s.add("hook.n30.p50_ms", 2.4 + run * 0.1)
        s.add("hook.n30.p99_ms", 5.0)
        s.add("hook.n30.cpu_us", 1200.0)
        s.add("hook.n30.per_cpu_second", 833.0)
        s.add("hook.n30.rate", 500.0)
        s.add("hook.n30.utilisation", 0.6)
        s.add("fast.job_update.per_cpu_second", 2000.0)
        s.add("noop.fast.job_update.per_cpu_second", 2500.0)
        s.add("lease.stamp.p50_ms", 0.8)
        s.add("noop.lease.stamp.p50_ms", 0.5)
    return s


def test_search_figures_compare_with_noop_plus_api_at_the_same_job_count() -> None:
    fast = [
        FastWorkload("fast.job_update", "job update", "/validate/jobs", b"", "allowed"),
        FastWorkload("lease.stamp", "stamp", "/mutate/leases", b"", "allowed+patch"),
    ]
    figs = {f.key: f for f in all_figures(_synthetic_series(), [30], fast, None)}
    p50 = figs["search.n30.p50"]
    assert p50.baseline is not None and p50.baseline.median == 2.0
    assert p50.ratio is not None and p50.ratio.median == pytest.approx(1.25)
    assert p50.met is True
    assert figs["search.n30.p99"].met is True  # 5 ms <= 10 ms at 30 Jobs
    assert figs["search.n30.per_core"].met is True  # 833/s >= 600/s
    assert figs["search.n30.cpu"].ratio is not None
    assert figs["search.n30.cpu"].ratio.median == pytest.approx(1.2)
    assert figs["fast.job_update.per_core"].met is True  # 0.8x >= 0.7x
    assert figs["lease.stamp.p50_over_noop"].value.median == pytest.approx(0.3)
    assert figs["lease.stamp.p50_over_noop"].met is True


def test_controller_figures_take_their_targets_from_what_run_returned() -> None:
    result = {
        "jobs": 1000,
        "cache_mb_per_1000_jobs": 2.1,
        "event_cpu_us": 30.0,
        "resync_cpu_ms": 12.0,
        "steady_state_writes": 0,
        "targets": {"cache_mb_per_1000_jobs": 3.0, "event_cpu_us": 25.0, "resync_cpu_ms": 100.0},
        "within_targets": {"cache_mb_per_1000_jobs": True},
    }
    figs = {f.key: f for f in controller_figures(result)}
    assert set(figs) == {
        "controller.cache_mb_per_1000_jobs",
        "controller.event_cpu_us",
        "controller.resync_cpu_ms",
        "controller.steady_state_writes",
    }
    assert figs["controller.cache_mb_per_1000_jobs"].unit == "MB"
    assert figs["controller.event_cpu_us"].met is False
    assert figs["controller.resync_cpu_ms"].met is True


def _burst(label: str, handoffs: list[float]) -> dict[str, Any]:
    per = {"read": 4.0, "watch": 1.0, "write": 5.0, "all": 10.0}
    return {
        "label": label,
        "searches": 4,
        "result": {
            "handoffs_s": handoffs,
            "startups_s": [0.5, 0.6, 0.7],
            "durations_s": [10.0, 10.0, 10.0, 10.0],
            "makespan_s": 22.0,
            "span_s": 21.5,
            "ideal_s": 40.0 / 3,
            "waves_s": 20.0,
        },
        "api_per_search": {"all": per, "submitters": per, "webhook": per, "controller": per},
    }


def test_load_figures_hold_the_issue_targets_for_elb_gate_submit_only() -> None:
    load = {
        "jobs": 3000,
        "burst_elb_gate": _burst("elb-gate submit", [0.4, 2.5]),
        "burst_polling": _burst("30 s polling", [12.0]),
    }
    figs = {f.key: f for f in load_figures(load)}
    assert figs["burst.elb_gate.handoff.p50"].met is False  # p50 of 0.4 and 2.5 is 1.45 s
    assert figs["burst.elb_gate.handoff.p99"].met is True
    # Judged against the shortest schedule of equal searches (whole waves: 22 s / 20 s),
    # not the sum bound (22 s / 13.3 s) that 4 searches on 3 slots can never reach.
    waves = figs["burst.elb_gate.makespan_waves"]
    assert waves.ratio is not None and waves.ratio.median == pytest.approx(1.1)
    assert waves.met is True
    makespan = figs["burst.elb_gate.makespan"]
    assert makespan.ratio is not None and makespan.ratio.median == pytest.approx(1.65)
    assert makespan.target is None
    assert figs["burst.polling.handoff.p50"].target is None
    assert figs["burst.polling.handoff.p50"].value.median == 12.0


def test_bursts_merge_into_pooled_handoffs_and_one_makespan_per_burst() -> None:
    def report(handoffs: list[float], makespan: float, units: float, reads: int) -> dict:
        r = _burst("elb-gate submit", handoffs)
        r["result"].update(searches=4, finished=4, makespan_ratio=1.5, waves_ratio=1.1)
        r["peak_active"] = 3
        r["failed"] = {}
        r["result"]["makespan_s"] = makespan
        per = {"read": reads / units, "watch": 0.0, "write": 1.0, "all": reads / units + 1.0}
        r["api_per_search"] = {
            "webhook": per,
            "all": per,
            "units": units,
            "detail": {"webhook": {"read jobs:list": reads}},
        }
        r["phases_s"] = {"command": [0.2] * len(handoffs)}
        return r

    merged = merge_bursts([report([0.4], 20.0, 4, 8), report([0.6, 2.0], 30.0, 4, 16)])
    assert merged["bursts"] == 2
    assert merged["result"]["handoffs_s"] == [0.4, 0.6, 2.0]
    assert merged["result"]["makespan_s"] == [20.0, 30.0]
    assert merged["result"]["searches"] == 8
    assert merged["api_per_search"]["webhook"]["read"] == 3.0  # (8 + 16) / 8 searches
    assert merged["api_per_search"]["detail"] == {"webhook": {"read jobs:list": 24}}
    assert merged["phases_s"]["command"] == [0.2, 0.2, 0.2]
    figs = {f.key: f for f in load_figures({"jobs": 30, "burst_elb_gate": merged})}
    makespan = figs["burst.elb_gate.makespan"]
    assert makespan.value.runs == 2 and makespan.ratio is not None


# -- workload ---------------------------------------------------------------------------


def test_the_job_mix_grows_by_prefix_and_is_mostly_finished() -> None:
    big = planned_jobs(3000)
    assert planned_jobs(300) == big[:300]
    states = Counter(j.state for j in big)
    assert states["running"] == 4
    assert states["failed"] == 6 and states["finishing"] == 3
    # The measured production mix: ~0.3 % of the history is selected by successful=0.
    history = planned_jobs(80_000)
    assert sum(j.state != "succeeded" for j in history) == 244
    assert {j.app for j in big} == {"submit", "blast", "finalizer"}
    assert len({j.name for j in big}) == 3000
    running_ids = {j.job_id for j in planned_jobs(30) if j.state == "running"}
    assert len(running_ids) == 2  # two active searches: a new one is under the ceiling of 3


def test_the_census_of_the_mix_as_stored_counts_the_two_running_searches() -> None:
    """Bodies as the benchmark writes them (ElasticBLAST's shapes, managed by the
    benchmark, with the status it writes): the census sees 2 active searches."""
    stored = []
    for job in planned_jobs(300):
        body = api_body(job, "bench")
        assert body["spec"]["managedBy"] == MANAGED_BY
        assert "ttlSecondsAfterFinished" not in body["spec"]
        body["metadata"]["creationTimestamp"] = "2026-01-05T10:00:00Z"
        body["status"] = job_status(job.state, NOW, NOW)
        stored.append(body)
    counted = census(stored, NOW, 300)
    assert counted.count == 2
    assert len(counted.unfinished) == 4


def test_the_finishing_finalizers_of_the_mix_hold_no_slot() -> None:
    """Every 100th search's finalizer still merges, recorded as having had batch work:
    the census LIST returns it (unfinished), and it is finishing, not active."""
    stored = []
    for job in planned_jobs(3000):
        if job.state == "succeeded":
            continue  # what status.successful=0 leaves out
        body = api_body(job, "bench")
        body["metadata"]["creationTimestamp"] = "2026-01-05T10:00:00Z"
        body["status"] = job_status(job.state, NOW, NOW)
        stored.append(body)
    counted = census(stored, NOW, 300)
    assert counted.count == 2
    assert len(counted.finishing) == 3 and not counted.orphans


# -- handoff and API counts -------------------------------------------------------------


def test_a_freed_slot_is_matched_with_the_next_admission_oldest_first() -> None:
    t = Timeline(started=0.0, ceiling=2)
    t.admitted = {"a": 1.0, "b": 1.5, "c": 11.2, "d": 12.0}
    t.finished = {"a": 11.0, "b": 11.5, "c": 21.0, "d": 22.0}
    r = analyse(t)
    assert r.startups == (1.0, 1.5)
    assert r.handoffs == pytest.approx((0.2, 0.5))  # a's slot -> c, b's slot -> d
    assert [m[2] for m in r.matched] == ["c", "d"]
    assert r.makespan == 22.0 and r.span == 21.0
    assert r.ideal == pytest.approx((10 + 10 + 9.8 + 10) / 2)
    assert r.waves == pytest.approx(2 * (39.8 / 4))


def test_a_slot_that_frees_when_no_one_waits_is_no_handoff() -> None:
    t = Timeline(started=0.0, ceiling=3)
    t.admitted = {"a": 0.5, "b": 0.7}
    t.finished = {"a": 5.0, "b": 6.0}
    r = analyse(t)
    assert r.handoffs == () and r.startups == (0.5, 0.7)
    assert r.makespan_ratio == pytest.approx(6.0 / ((4.5 + 5.3) / 3))


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/apis/batch/v1/namespaces/x/jobs?labelSelector=app", ("read", "jobs:list")),
        ("GET", "/apis/batch/v1/namespaces/x/jobs?watch=1&resourceVersion=7", ("watch", "jobs")),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", ("read", "leases")),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", ("write", "leases")),
        ("PUT", "/apis/batch/v1/namespaces/x/jobs/j/status", ("write", "jobs/status")),
        ("DELETE", "/api/v1/namespaces/x/configmaps/c", ("write", "configmaps")),
        ("GET", "/api/v1/nodes?watch=true", ("watch", "nodes")),
        ("GET", "/apis", ("other", "/apis")),
    ],
)
def test_requests_are_classified_by_kind_and_resource(
    method: str, path: str, expected: tuple[str, str]
) -> None:
    assert classify(method, path) == expected


def test_a_tally_divides_by_the_unit_and_leaves_discovery_out() -> None:
    t = tally(
        [
            ("GET", "/apis/batch/v1/namespaces/x/jobs?labelSelector=a"),
            ("GET", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l"),
            ("POST", "/apis/batch/v1/namespaces/x/jobs"),
            ("POST", "/apis/batch/v1/namespaces/x/jobs"),
            ("GET", "/api"),
        ]
    )
    assert t.per(2) == {"read": 1.0, "watch": 0.0, "write": 1.0, "all": 2.0}
    assert t.detail() == {"read jobs:list": 1, "read leases": 1, "write jobs": 2}


@pytest.mark.parametrize(
    ("body", "operation", "resource"),
    [
        (new_search_finalizer("bench", "alice"), "CREATE", "jobs"),
        (job_controller_update("bench"), "UPDATE", "jobs"),
        (other_lease_update("bench"), "UPDATE", "leases"),
        (submit_lease_renew("bench", "alice", NOW, stamped=True), "UPDATE", "leases"),
    ],
)
def test_review_bodies_are_admission_reviews_the_webhook_parses(
    body: bytes, operation: str, resource: str
) -> None:
    req = AdmissionRequest.from_review(orjson.loads(body))
    assert (req.operation, req.resource, req.namespace) == (operation, resource, "bench")


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, b'{"response": {"allowed": true}}', "allowed"),
        (200, b'{"response": {"allowed": true, "patch": "W10="}}', "allowed+patch"),
        (200, b'{"response": {"allowed": false}}', "denied"),
        (200, b"not json", "unparseable"),
        (503, b"", "http-503"),
    ],
)
def test_answers_are_classified(status: int, body: bytes, outcome: str) -> None:
    assert outcome_of(status, body) == outcome


def test_profile_folds_collapsed_stacks_into_self_and_inclusive_time() -> None:
    raw = [
        f"run (asyncio/base_events.py:1);_judge ({CHECKOUT}/webhook/admission.py:80);"
        f"census ({CHECKOUT}/elbgate/census.py:120) 30",
        "run (asyncio/base_events.py:1);select (/usr/lib/python3.11/selectors.py:5) 70",
    ]
    prof = fold(raw)
    assert prof.samples == 100
    assert prof.self_by_package["elbgate"] == 30
    assert prof.inclusive_by_function["run (asyncio/base_events.py)"] == 100
    assert "census" in prof.as_text()
    assert package_of("/x/.venv/lib/python3.11/site-packages/aiohttp/web.py") == "aiohttp"


class _Recorded:
    """A thing measured one step at a time that records when it was stepped."""

    def __init__(self, name: str, order: list[str], outcome: str = "allowed") -> None:
        self.name, self.order, self.outcome = name, order, outcome

    async def step(self) -> tuple[int, str]:
        self.order.append(self.name)
        return 1000 * len(self.order), self.outcome


async def test_interleaved_takes_one_step_of_each_per_round_whoever_went_first_rotating() -> None:
    order: list[str] = []
    steps = {n: _Recorded(n, order) for n in ("api", "noop", "hook")}
    measured = await interleaved(steps, rounds=4, warmup=2, max_seconds=60.0)
    warm, rounds = order[:6], order[6:]
    assert warm == ["api", "api", "noop", "noop", "hook", "hook"]
    assert [rounds[i : i + 3] for i in range(0, 12, 3)] == [
        ["api", "noop", "hook"],
        ["noop", "hook", "api"],
        ["hook", "api", "noop"],
        ["api", "noop", "hook"],
    ]
    assert {n: m.count for n, m in measured.items()} == {"api": 4, "noop": 4, "hook": 4}
    assert measured["noop"].outcomes == Counter({"allowed": 4})
    assert rotated(["a", "b", "c"], 5) == ["c", "a", "b"]


def test_slices_combine_into_one_pass() -> None:
    a = Measured([1, 2], 0.5, Counter({"allowed": 2}), {"server": 0.25, "apiserver": 0.5})
    b = Measured([3], 0.25, Counter({"allowed": 1, "denied": 1}), {"server": 0.5})
    m = combined([a, b])
    assert m.latencies_ns == [1, 2, 3] and m.count == 3
    assert m.wall_seconds == 0.75
    assert m.outcomes == Counter({"allowed": 3, "denied": 1})
    assert m.cpu_seconds == {"server": 0.75, "apiserver": 0.5}


# -- end to end -------------------------------------------------------------------------


@pytest.mark.timeout(1200)
def test_a_quick_run_on_the_control_plane_measures_every_part(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """``make bench ARGS=--quick`` on the session's control plane: the real webhook and
    controller with their ServiceAccounts and the shipped RBAC, Jobs written to the real
    API server. Checks what each part measured, never how fast."""
    out = tmp_path / "results.json"
    env = {**os.environ, ATTACH_ENV: str(control_plane.state_dir)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--no-controller", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1100,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "search admission p50, 3 Jobs" in done.stdout
    doc = orjson.loads(out.read_bytes())
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["python"]
    assert not doc["notes"], doc["notes"]
    figures, raw = doc["figures"], doc["raw"]

    # Admission: every pass answered what its workload must get, against the real API.
    p50 = figures["search.n3.p50"]
    assert p50["value"]["median"] > 0 and p50["baseline"]["median"] > 0
    outcomes = raw["outcomes"]
    assert set(outcomes["hook.n3"]) == {"allowed"}
    assert set(outcomes["cap.n3"]) == {"allowed"}  # the capacity rule on, under its ceiling
    assert set(outcomes["list.n3"]) == {"allowed"}  # the census LIST the watch replaces
    assert figures["scale.search.n3.p99_vs_list"]["ratio"]["median"] > 0
    # The webhook on its own (beside the no-op only), the same rounds at each count:
    # the figure the p99 target is judged on, and what its handler logged.
    assert set(outcomes["alone.hook.n3"]) == set(outcomes["alone.hook.n0"]) == {"allowed"}
    assert sum(outcomes["alone.hook.n3"].values()) == sum(outcomes["alone.hook.n0"].values())
    assert figures["scale.search.n3.p99_vs_0"]["ratio"]["median"] > 0
    assert "on its own" in figures["scale.search.n3.p99_vs_0"]["note"]
    assert figures["scale.search.n3.alone_p99"]["baseline"]["median"] > 0  # the handler's
    # How the measured webhook read the census in its latency passes, from its /metrics,
    # each read named by source and reason: on its own, one per admission (warm-ups too).
    alone_reads = outcomes["alone.hook.n3.census_reads"]
    assert sum(alone_reads.values()) >= sum(outcomes["alone.hook.n3"].values()), alone_reads
    assert sum(outcomes["hook.n3.census_reads"].values()) > 0
    for prefix in ("hook.n3", "alone.hook.n3"):
        assert all(k.startswith(("watch (", "list (")) for k in outcomes[f"{prefix}.census_reads"])
        assert f"outcomes {prefix}.census_reads: " in done.stdout
    # And its fenced reads' two phases: one fence write and one wait per read from the watch.
    fence = outcomes["alone.hook.n3.census_fence"]
    assert fence["write"] == fence["wait"] == alone_reads["watch (fenced)"] > 0, fence
    assert fence["write ms"] > 0, fence
    assert "outcomes alone.hook.n3.census_fence: " in done.stdout
    # And the API server's garbage collection over each latency pass, from its /metrics:
    # a live heap after its last cycle, and the cycles and their CPU counted from 0.
    for prefix in ("hook.n3", "alone.hook.n3"):
        assert min(raw["series"][f"{prefix}.apiserver_heap_live_mb"]) > 0
        assert min(raw["series"][f"{prefix}.apiserver_gc_cycles"]) >= 0
        assert min(raw["series"][f"{prefix}.apiserver_gc_cpu_ms"]) >= 0
        assert f"apiserver gc {prefix}: cycles " in done.stdout
    assert set(outcomes["lease.stamp"]) == {"allowed+patch"}
    assert set(outcomes["api.n3"]) == {"jobs=0,lease=yes"}  # 3 Jobs: none unfinished
    assert figures["capacity.n3.p50"]["ratio"]["median"] > 0

    load = raw["load"]
    assert load["jobs"] == 3
    for key, searches in (("burst_elb_gate", 4), ("burst_polling", 4)):
        burst = load[key]
        r = burst["result"]
        assert burst["failed"] == {}
        assert r["searches"] == r["finished"] == searches
        assert 1 <= burst["peak_active"] <= 3
        assert len(r["startups_s"]) <= 3
        assert len(r["handoffs_s"]) + len(r["startups_s"]) == searches
        api = burst["api_per_search"]
        assert api["detail"]["submitters"]["write jobs"] == 4 * searches  # each search's Jobs
        assert api["webhook"]["read"] >= 2  # the admission record and the Lease, at least
        # The webhook writes the admission record (at least each search's opening) and
        # the census fence (each judged Job), and nothing else per search (its readiness
        # key, renewed on its own clock, is not counted: bench/api_counts.py).
        assert api["webhook"]["write"] >= 1
        writes = {k for k in api["detail"]["webhook"] if k.startswith("write ")}
        assert writes == {"write configmaps", "write jobs"}
    assert load["burst_elb_gate"]["api_per_search"]["submitters"]["watch"] > 0  # waits watching
    assert load["burst_polling"]["api_per_search"]["submitters"]["watch"] == 0
    phases = load["burst_elb_gate"]["phases_s"]
    assert len(phases["process_start"]) == 4 and len(phases["command"]) == 4

    renewal = load["renewal"]["elb-gate client"]
    assert renewal["submitters"] == {"read": 0.0, "watch": 0.0, "write": 1.0, "all": 1.0}
    assert renewal["webhook"]["all"] == 0  # the stamp and the guard make no API call
    assert load["resync"]["webhook"]["all"] == 0
    assert load["resync"]["reconciles"] >= 1

    # The admission record's cost: a search's first Job reads it, writes the census
    # fence (the census is then read from the webhook's own Job watch), reads the Lease
    # and writes the record; a batch Job of an active search only reads it and writes
    # the fence. Each review makes at least those calls and no other kind but the census
    # LIST, read whenever the watch cannot say in time. After answering, the replica
    # that reserved an opening's Job looks for it (GET jobs) on its own clock: a look
    # falls inside the window of a later review or, for the pass's last reviews, after
    # the pass has ended, so only that some looks were counted is exact, not one per
    # review. The same holds for the record's entry dropped once its create could no
    # longer land (a read and a write of the record).
    order = raw["admission_order"]
    assert order["opening"]["outcomes"] == {"allowed": order["opening"]["requests"]}
    assert order["joining"]["outcomes"] == {"allowed": order["joining"]["requests"]}
    opening = dict(order["opening"]["api_requests_by_call"])
    assert opening.pop("GET jobs", 0) > 0
    opening.pop("GET jobs:list", None)
    assert set(opening) == {"GET configmaps", "PATCH jobs", "GET leases", "PUT configmaps"}
    assert all(n >= 1.0 for n in opening.values()), opening
    joining = dict(order["joining"]["api_requests_by_call"])
    joining.pop("GET jobs", None)
    joining.pop("GET jobs:list", None)
    assert {"GET configmaps", "PATCH jobs"} <= set(joining)
    assert set(joining) <= {"GET configmaps", "PATCH jobs", "PUT configmaps"}, joining
    assert joining["GET configmaps"] >= 1.0 and joining["PATCH jobs"] >= 1.0
    assert figures["order.opening.p50"]["value"]["median"] > 0
    # The real controller at each Job count: start-up, relist after 410, leader change.
    for n in ("0", "3"):
        c = raw["controller_scale"][n]
        assert c["startup_to_synced_s"] > 0 and c["relist_s"] > 0 and c["leader_change_s"] > 0
        assert 0 < c["relist_bytes"] <= c["live_list_bytes"] * 2 + 4096
        assert c["live_list_bytes"] <= c["unfiltered_list_bytes"]
        assert c["steady_rss_mb"] > 0 and c["peak_rss_mb"] >= c["steady_rss_mb"]
        assert c["leader_change_list_bytes"] == 0  # the successor was synced already
    assert raw["controller_scale"]["3"]["unfiltered_list_items"] == 3
    assert raw["fills"] and all(f["writes_per_second"] > 0 for f in raw["fills"])
    assert figures["scale.apiserver_cpu.n3"]["value"]["median"] > 0

    reclaim = raw["reclaim"]["cases"]["pod_deleted"]
    assert reclaim["worst_seconds"] > 0 and reclaim["evidence"]
    assert figures["reclaim.pod_deleted"]["met"] is not None
    assert figures["burst.elb_gate.handoff.p50"]["target"]["limit"] == 1.0


def test_the_plotted_curve_has_one_point_per_job_count(tmp_path: Path) -> None:
    from bench import plot

    doc = {
        "settings": {"job_counts": [0, 30]},
        "machine": {"cores": 2, "date": "2026-12-01"},
        "raw": {
            "series": {
                "alone.hook.n0.p99_ms": [3.0, 1.0, 2.0],
                "alone.hook.n30.p99_ms": [4.0],
                "hook.n30.p99_ms": [9.0],
                "list.n30.p99_ms": [40.0],
            },
            "controller_scale": {"30": {"startup_to_synced_s": 2.5, "live_list_bytes": 2e6}},
        },
    }
    data = plot.curve(doc)
    assert data["jobs"] == [0.0, 30.0] and data["p99_ms"] == [2.0, 4.0]
    assert data["among_lists_p99_ms"][1] == 9.0 and math.isnan(data["among_lists_p99_ms"][0])
    assert data["list_p99_ms"][1] == 40.0 and math.isnan(data["list_p99_ms"][0])
    assert data["synced_s"][1] == 2.5 and data["relist_mb"][1] == 2.0
    assert math.isnan(data["synced_s"][0]) and math.isnan(data["p50_ms"][0])
    plot.draw(doc, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
