"""From per-run series to the rows of the table: each figure with its baseline,
ratio and target (the targets are the issue's, docs/benchmarks.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bench.report import Figure, Target, paired
from bench.scenarios import WEBHOOK_TIMEOUT_SECONDS, FastWorkload, Series
from bench.stats import percentile, spread

OVERHEAD_RATIO = 1.3
P99_MS = {30: 10.0, 300: 40.0}
TIMEOUT_SHARE = 0.25
SEARCH_RATE_AT_30 = 600.0
FAST_PATH_RATIO = 0.7
STAMP_P50_MS = 0.5
HANDOFF_P50_S = 1.0
HANDOFF_P99_S = 3.0
MAKESPAN_RATIO = 1.1
RECLAIM_RATIO = 1.0
# Issue 26: the namespace as it really is (80,000 Jobs).
SCALE_P99_RATIO = 1.5
CONTROLLER_STEADY_MB = 128.0
CONTROLLER_PEAK_MB = 256.0
CONTROLLER_SYNC_S = 30.0
CONTROLLER_SYNC_RATIO = 2.0
RELIST_BYTES_RATIO = 0.05


def _sum(*series: Sequence[float]) -> list[float]:
    """Element-wise sum of per-run series (runs of one repeat are paired by index)."""
    n = min((len(s) for s in series), default=0)
    return [sum(s[i] for s in series) for i in range(n)]


def _minus(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=False)]


def _inverse_us(cpu_us: Sequence[float]) -> list[float]:
    return [1e6 / x if x > 0 else math.nan for x in cpu_us]


def floor_figures(s: Series, job_counts: Sequence[int]) -> list[Figure]:
    """The floor itself: the no-op handler, and the bare API round trip at each N."""
    out = [
        paired("floor.noop.p50", "no-op handler p50", s.get("noop.search.p50_ms"), "ms"),
        paired("floor.noop.p99", "no-op handler p99", s.get("noop.search.p99_ms"), "ms"),
        paired("floor.noop.cpu", "no-op handler CPU/request", s.get("noop.search.cpu_us"), "us"),
        paired(
            "floor.noop.per_core",
            "no-op handler requests/s on one core",
            s.get("noop.search.per_cpu_second"),
            "/s",
        ),
    ]
    for n in job_counts:
        api_p50, api_p99 = s.get(f"api.n{n}.p50_ms"), s.get(f"api.n{n}.p99_ms")
        out += [
            paired(f"floor.api.n{n}.p50", f"API LIST+GET p50, {n} Jobs", api_p50, "ms"),
            paired(f"floor.api.n{n}.p99", f"API LIST+GET p99, {n} Jobs", api_p99, "ms"),
            paired(
                f"floor.api.n{n}.cpu",
                f"API LIST+GET client CPU, {n} Jobs",
                s.get(f"api.n{n}.cpu_us"),
                "us",
            ),
        ]
    return out


def search_figures(s: Series, n: int) -> list[Figure]:
    """Search admission (Gate A + Gate B, uncached) at ``n`` Jobs against its floor."""
    hook, api, noop = f"hook.n{n}", f"api.n{n}", f"noop.n{n}"
    floor_p50 = _sum(s.get(f"{noop}.p50_ms"), s.get(f"{api}.p50_ms"))
    floor_p99 = _sum(s.get(f"{noop}.p99_ms"), s.get(f"{api}.p99_ms"))
    floor_cpu = _sum(s.get("noop.search.cpu_us"), s.get(f"{api}.cpu_us"))
    p99_target = P99_MS.get(n)
    if n >= 3000:
        p99_target = WEBHOOK_TIMEOUT_SECONDS * 1000 * TIMEOUT_SHARE
    util = spread(s.get(f"{hook}.utilisation")).median
    api_busy = spread(s.get(f"{hook}.apiserver_utilisation")).median
    return [
        paired(
            f"search.n{n}.p50",
            f"search admission p50, {n} Jobs",
            s.get(f"{hook}.p50_ms"),
            "ms",
            floor_p50,
            "no-op + API",
            Target(OVERHEAD_RATIO, on="ratio"),
        ),
        paired(
            f"search.n{n}.p50_vs_reads",
            "  same, against a no-op making the same reads",
            s.get(f"{hook}.p50_ms"),
            "ms",
            s.get(f"reads.n{n}.p50_ms"),
            "no-op+reads",
            Target(OVERHEAD_RATIO, on="ratio"),
            note="admission minus policy in one process: the tightest floor",
        ),
        paired(
            f"search.n{n}.handler_p50",
            "  of which inside the webhook's handler (its log)",
            s.get(f"{hook}.handler_p50_ms"),
            "ms",
            s.get(f"{api}.p50_ms"),
            "API LIST+GET",
            note="duration_ms the webhook logs: reads + policy, without HTTP in and out",
        ),
        paired(
            f"search.n{n}.p99",
            f"search admission p99, {n} Jobs",
            s.get(f"{hook}.p99_ms"),
            "ms",
            floor_p99,
            "no-op + API",
            Target(p99_target) if p99_target else None,
        ),
        paired(
            f"search.n{n}.cpu",
            f"search admission CPU/admission, {n} Jobs",
            s.get(f"{hook}.cpu_us"),
            "us",
            floor_cpu,
            "no-op + API client",
        ),
        paired(
            f"search.n{n}.cpu_vs_reads",
            "  same, against a no-op making the same reads",
            s.get(f"{hook}.cpu_us"),
            "us",
            s.get(f"reads.n{n}.cpu_us"),
            "no-op+reads",
            Target(OVERHEAD_RATIO, on="ratio"),
        ),
        paired(
            f"search.n{n}.per_core",
            f"search admissions/s on one core, {n} Jobs",
            s.get(f"{hook}.per_cpu_second"),
            "/s",
            _inverse_us(floor_cpu),
            "floor",
            Target(SEARCH_RATE_AT_30, at_most=False) if n == 30 else None,
            note="admissions per CPU-second of the webhook (= the rate of one saturated core)",
        ),
        paired(
            f"search.n{n}.rate",
            f"  measured admissions/s at c=16 (webhook {util:.0%} busy, API server {api_busy:.0%})",
            s.get(f"{hook}.rate"),
            "/s",
            note="wall-clock rate; below the per-core figure when the API server's core is "
            "the limit",
        ),
    ]


def capacity_figures(s: Series, n: int) -> list[Figure]:
    """Search admission with the node-capacity rule on, against it off (issue 13: within
    1.3x), each run paired with the run with it off made moments before."""
    cap, hook = f"cap.n{n}", f"hook.n{n}"
    if not s.get(f"{cap}.p50_ms"):
        return []
    return [
        paired(
            f"capacity.n{n}.p50",
            f"search admission p50 with the capacity rule on, {n} Jobs",
            s.get(f"{cap}.p50_ms"),
            "ms",
            s.get(f"{hook}.p50_ms"),
            "rule off",
            Target(OVERHEAD_RATIO, on="ratio"),
        ),
        paired(
            f"capacity.n{n}.handler_p50",
            "  of which inside the handler (its log), rule on",
            s.get(f"{cap}.handler_p50_ms"),
            "ms",
            s.get(f"{hook}.handler_p50_ms"),
            "rule off",
        ),
        paired(
            f"capacity.n{n}.cpu",
            "  CPU/admission with the capacity rule on",
            s.get(f"{cap}.cpu_us"),
            "us",
            s.get(f"{hook}.cpu_us"),
            "rule off",
            Target(OVERHEAD_RATIO, on="ratio"),
        ),
    ]


def fast_figures(s: Series, w: FastWorkload) -> list[Figure]:
    """A request answered with no API call, against the no-op given the same bytes."""
    noop = f"noop.{w.key}"
    fast = w.key.startswith("fast.")
    stamp = w.key == "lease.stamp"
    out = [
        paired(
            f"{w.key}.p50",
            f"{w.label} p50",
            s.get(f"{w.key}.p50_ms"),
            "ms",
            s.get(f"{noop}.p50_ms"),
            "no-op",
        ),
    ]
    if stamp:
        out.append(
            paired(
                f"{w.key}.p50_over_noop",
                "  Lease stamp p50 minus no-op p50 (its own time)",
                _minus(s.get(f"{w.key}.p50_ms"), s.get(f"{noop}.p50_ms")),
                "ms",
                target=Target(STAMP_P50_MS),
                note="the round trip's floor (client, TLS, HTTP) is the no-op's; the stamp's "
                "own cost is the difference",
            )
        )
    out += [
        paired(
            f"{w.key}.p99",
            f"{w.label} p99",
            s.get(f"{w.key}.p99_ms"),
            "ms",
            s.get(f"{noop}.p99_ms"),
            "no-op",
        ),
        paired(
            f"{w.key}.per_core",
            f"{w.label} requests/s on one core",
            s.get(f"{w.key}.per_cpu_second"),
            "/s",
            s.get(f"{noop}.per_cpu_second"),
            "no-op",
            Target(FAST_PATH_RATIO, on="ratio", at_most=False) if fast else None,
        ),
    ]
    return out


def controller_figures(result: Mapping[str, Any]) -> list[Figure]:
    """Rows for what ``bench.controller_bench.run()`` returned: every figure it gives a
    target for, plus the rest of its numbers as information."""
    targets: Mapping[str, float] = result.get("targets") or {}
    units = {"_mb": "MB", "_us": "us", "_ms": "ms"}
    out = []
    for key, value in result.items():
        if key in ("targets", "within_targets", "jobs", "events_measured"):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        unit = next((u for suffix, u in units.items() if suffix in key), "")
        limit = targets.get(key)
        out.append(
            paired(
                f"controller.{key}",
                f"controller: {key.replace('_', ' ')}",
                [float(value)],
                unit,
                target=Target(float(limit)) if limit is not None else None,
            )
        )
    return out


def _floats(value: Any) -> list[float]:
    """A per-burst figure: one number, or one per burst."""
    values = value if isinstance(value, list) else [value]
    return [math.nan if v is None else float(v) for v in values]


def burst_figures(key: str, burst: Mapping[str, Any], targets: bool) -> list[Figure]:
    """Handoff latency and makespan of a burst, or of several pooled (``targets``: the
    issue's, which are for ``elb-gate submit``)."""
    r = burst["result"]
    bursts = int(burst.get("bursts", 1))
    label = f"{burst['label']}, {burst['searches']} searches" + (
        f" (x{bursts} bursts)" if bursts > 1 else ""
    )
    handoffs = [float(x) for x in r["handoffs_s"]]
    out = [
        paired(
            f"{key}.handoff.p50",
            f"handoff p50 (slot free -> next admitted): {label}",
            [percentile(handoffs, 50)],
            "s",
            target=Target(HANDOFF_P50_S) if targets else None,
            note=f"{len(handoffs)} handoffs",
        ),
        paired(
            f"{key}.handoff.p99",
            f"  handoff p99 ({len(handoffs)} handoffs, "
            f"max {max(handoffs, default=math.nan):.2f} s)",
            [percentile(handoffs, 99)],
            "s",
            target=Target(HANDOFF_P99_S) if targets else None,
        ),
        paired(
            f"{key}.startup.p50",
            "  start-up p50 (burst start -> admitted, the first slots)",
            [percentile([float(x) for x in r["startups_s"]], 50)],
            "s",
        ),
        paired(
            f"{key}.makespan",
            "  makespan, against sum(durations) / ceiling",
            _floats(r["makespan_s"]),
            "s",
            _floats(r["ideal_s"]),
            "ideal packing",
            note="a bound no schedule of n equal searches reaches unless the ceiling divides n",
        ),
        paired(
            f"{key}.span",
            "  same, from the first admission (without the submitters' start-up)",
            _floats(r["span_s"]),
            "s",
            _floats(r["ideal_s"]),
            "ideal packing",
        ),
        paired(
            f"{key}.makespan_waves",
            "  makespan, against whole waves: ceil(n / ceiling) x mean duration",
            _floats(r["makespan_s"]),
            "s",
            _floats(r["waves_s"]),
            "whole waves",
            Target(MAKESPAN_RATIO, on="ratio") if targets else None,
            note="the shortest schedule of n equal searches on the ceiling's slots",
        ),
        paired(
            f"{key}.duration",
            "  search duration (admitted -> finished), mean",
            [sum(r["durations_s"]) / len(r["durations_s"])] if r["durations_s"] else [],
            "s",
        ),
    ]
    out += _api_rows(f"{key}.api", "  API requests per admitted search", burst["api_per_search"])
    return out


def _api_rows(key: str, label: str, per: Mapping[str, Any]) -> list[Figure]:
    """Requests per unit: all (reads / watches / writes), then by component."""
    total = per["all"]
    out = [
        paired(
            key,
            f"{label} (reads {total['read']:.1f}, watches {total['watch']:.1f}, "
            f"writes {total['write']:.1f})",
            [float(total["all"])],
            "",
        )
    ]
    for component in ("submitters", "webhook", "controller"):
        part = per.get(component)
        if part is None:
            continue
        out.append(
            paired(
                f"{key}.{component}",
                f"    by the {component} (reads {part['read']:.1f}, watches "
                f"{part['watch']:.1f}, writes {part['write']:.1f})",
                [float(part["all"])],
                "",
            )
        )
    return out


def load_figures(load: Mapping[str, Any]) -> list[Figure]:
    """The cluster-load phase (:mod:`bench.cluster_load`): API requests per renewal and
    per resync at its Job count, and the two bursts."""
    jobs = load.get("jobs")
    out: list[Figure] = []
    for client, per in (load.get("renewal") or {}).items():
        out += _api_rows(f"api.renewal.{client}", f"API requests per Lease renewal, {client}", per)
    resync = load.get("resync")
    if resync:
        out += _api_rows(
            "api.resync",
            f"API requests per controller resync ({resync['resync_seconds']:g} s), {jobs} Jobs",
            resync,
        )
    if load.get("burst_elb_gate"):
        out += burst_figures("burst.elb_gate", load["burst_elb_gate"], targets=True)
    if load.get("burst_polling"):
        out += burst_figures("burst.polling", load["burst_polling"], targets=False)
    return out


def reclaim_figures(result: Mapping[str, Any]) -> list[Figure]:
    """Worst dead-holder reclaim per case (:mod:`bench.reclaim_latency`) against its
    target: 15 s from the evidence, 1 s from the expiry for ``expired``."""
    out = []
    for case, row in result["cases"].items():
        target = float(row.get("target_seconds", result["target_seconds"]))
        what = "Lease reclaim after its expiry" if case == "expired" else "dead-holder reclaim"
        out.append(
            paired(
                f"reclaim.{case}",
                f"{what}, worst of {result['runs']}: {case}",
                [float(row["worst_seconds"])],
                "s",
                [target],
                "target",
                Target(RECLAIM_RATIO, on="ratio"),
                note=",".join(row["evidence"]),
            )
        )
    return out


def order_figures(result: Mapping[str, Any]) -> list[Figure]:
    """What a search's first Job and a Job of an active search cost the webhook, with
    the admission record (:mod:`bench.admission_order`): latency and API requests."""
    out = []
    for kind, what in (
        ("opening", "a new search's first Job (writes the record)"),
        ("joining", "a batch Job of an active search (reads the record)"),
    ):
        row = result[kind]
        calls = ", ".join(f"{k} {v:g}" for k, v in row["api_requests_by_call"].items())
        for q in ("p50", "p99"):
            out.append(
                paired(f"order.{kind}.{q}", f"admission of {what}: {q}", [row[f"{q}_ms"]], "ms")
            )
        out.append(
            paired(
                f"order.{kind}.api_requests",
                f"admission of {what}: API requests per review",
                [row["api_requests_per_review"]],
                "/review",
                note=calls,
            )
        )
    return out


def scale_figures(
    s: Series,
    job_counts: Sequence[int],
    scale: Mapping[int, Mapping[str, Any]],
    fills: Sequence[Mapping[str, float]],
) -> list[Figure]:
    """The namespace as it grows: admission at the largest count against 0 Jobs, the API
    server's CPU per admission, and the real controller at each count (issue 26)."""
    out: list[Figure] = []
    top = max(job_counts, default=0)
    if 0 in job_counts and top > 0:
        alone = bool(s.get(f"alone.hook.n{top}.p99_ms"))
        key = "alone.hook" if alone else "hook"
        out.append(
            paired(
                f"scale.search.n{top}.p99_vs_0",
                f"search admission p99, {top} Jobs against 0 Jobs",
                s.get(f"{key}.n{top}.p99_ms"),
                "ms",
                s.get(f"{key}.n0.p99_ms"),
                "p99 at 0 Jobs",
                Target(SCALE_P99_RATIO, on="ratio"),
                note="the webhook on its own beside the no-op, the same rounds at each count"
                if alone
                else "",
            )
        )
        if alone:
            out.append(
                paired(
                    f"scale.search.n{top}.p99_vs_0_among_lists",
                    "  same, its requests between the LIST comparators'",
                    s.get(f"hook.n{top}.p99_ms"),
                    "ms",
                    s.get("hook.n0.p99_ms"),
                    "p99 at 0 Jobs",
                    note="fewer rounds at large counts; each request after a LIST's work",
                )
            )
    for n in job_counts:
        if s.get(f"alone.hook.n{n}.p99_ms"):
            for q in ("p50", "p99"):
                out.append(
                    paired(
                        f"scale.search.n{n}.alone_{q}",
                        f"search admission {q} on its own, {n} Jobs",
                        s.get(f"alone.hook.n{n}.{q}_ms"),
                        "ms",
                        s.get(f"alone.hook.n{n}.handler_{q}_ms"),
                        "in the handler",
                        note="handler: duration_ms the webhook logs (reads + policy)",
                    )
                )
    if 0 in job_counts and top > 0 and s.get(f"list.n{top}.p99_ms"):
        out.append(
            paired(
                f"scale.search_list.n{top}.p99_vs_0",
                f"  with ELB_GATE_CENSUS_READ=list: p99, {top} Jobs against 0 Jobs",
                s.get(f"list.n{top}.p99_ms"),
                "ms",
                s.get("list.n0.p99_ms"),
                "p99 at 0 Jobs",
            )
        )
    for n in job_counts:
        if s.get(f"list.n{n}.p99_ms"):
            out.append(
                paired(
                    f"scale.search.n{n}.p99_vs_list",
                    f"search admission p99, {n} Jobs: the census at a fence against the LIST",
                    s.get(f"hook.n{n}.p99_ms"),
                    "ms",
                    s.get(f"list.n{n}.p99_ms"),
                    "LIST",
                )
            )
        out.append(
            paired(
                f"scale.apiserver_cpu.n{n}",
                f"API server CPU per search admission, {n} Jobs",
                s.get(f"hook.n{n}.apiserver_cpu_us"),
                "us",
                s.get(f"list.n{n}.apiserver_cpu_us") or None,
                "LIST",
                note="kube-apiserver + etcd over the webhook's saturation pass",
            )
        )
    for fill in fills:
        out.append(
            paired(
                f"scale.fill.{int(fill['jobs'])}",
                f"namespace filled: {int(fill['jobs'])} Jobs (create + /status)",
                [fill["writes_per_second"]],
                "/s",
                note=f"{fill['seconds']} s",
            )
        )
    base = scale.get(3000) or {}
    for n in job_counts:
        c = scale.get(n)
        if not c:
            continue
        at_top = n == top and n >= 30_000
        sync = [float(c["startup_to_synced_s"])]
        out += [
            paired(
                f"scale.controller.n{n}.synced",
                f"controller start-up to synced, {n} Jobs",
                sync,
                "s",
                [float(base["startup_to_synced_s"])] if at_top and base else None,
                "at 3000 Jobs",
                Target(CONTROLLER_SYNC_RATIO, on="ratio") if at_top and base else None,
            ),
        ]
        if at_top:
            out.append(
                paired(
                    f"scale.controller.n{n}.synced_abs",
                    "  same, against 30 s",
                    sync,
                    "s",
                    target=Target(CONTROLLER_SYNC_S),
                )
            )
        out += [
            paired(
                f"scale.controller.n{n}.relist_wire_bytes",
                f"  bytes on the wire per relist (gzip), {n} Jobs",
                [float(c["relist_bytes"])],
                "B",
            ),
            paired(
                f"scale.controller.n{n}.relist_bytes",
                f"  bytes read per relist (after 410, decoded), {n} Jobs",
                [float(c.get("relist_bytes_decoded", c["live_list_bytes"]))],
                "B",
                [float(c["unfiltered_list_bytes"])] if c["unfiltered_list_bytes"] else None,
                f"unfiltered LIST ({c['unfiltered_list_items']} Jobs)",
                Target(RELIST_BYTES_RATIO, on="ratio") if at_top else None,
            ),
            paired(
                f"scale.controller.n{n}.relist_s",
                f"  relist after 410 until synced, {n} Jobs",
                [float(c["relist_s"])],
                "s",
            ),
            paired(
                f"scale.controller.n{n}.leader_change_s",
                f"  leader change (SIGTERM) until the other leads, {n} Jobs",
                [float(c["leader_change_s"])],
                "s",
                note=f"{c['leader_change_list_bytes']} bytes of Jobs LISTs during it",
            ),
            paired(
                f"scale.controller.n{n}.steady_rss",
                f"  steady RSS, {n} Jobs",
                [float(c["steady_rss_after_relist_mb"])],
                "MB",
                target=Target(CONTROLLER_STEADY_MB) if at_top else None,
            ),
            paired(
                f"scale.controller.n{n}.peak_rss",
                f"  peak RSS (VmHWM, start-up and relist), {n} Jobs",
                [float(c["peak_rss_mb"])],
                "MB",
                target=Target(CONTROLLER_PEAK_MB) if at_top else None,
            ),
        ]
    return out


def all_figures(
    s: Series,
    job_counts: Sequence[int],
    fast: Sequence[FastWorkload],
    controller: Mapping[str, Any] | None,
    load: Mapping[str, Any] | None = None,
    reclaim: Mapping[str, Any] | None = None,
    order: Mapping[str, Any] | None = None,
    scale: Mapping[int, Mapping[str, Any]] | None = None,
    fills: Sequence[Mapping[str, float]] = (),
) -> list[Figure]:
    """Every row, in the order printed."""
    out = floor_figures(s, job_counts)
    for n in job_counts:
        out += search_figures(s, n)
    out += scale_figures(s, job_counts, scale or {}, fills)
    for n in job_counts:
        out += capacity_figures(s, n)
    for w in fast:
        out += fast_figures(s, w)
    if load:
        out += load_figures(load)
    if reclaim:
        out += reclaim_figures(reclaim)
    if order:
        out += order_figures(order)
    if controller:
        out += controller_figures(controller)
    return out
