"""``make bench`` / ``python -m bench``: measure, print the table, write bench/results.json."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench.child_processes import remove, scratch_dir
from bench.cluster import FINALIZER_GRACE_SECONDS
from bench.figures import all_figures
from bench.load import LoadPlan
from bench.machine import load_average, machine_info
from bench.report import Results, format_table, markdown_table, write_results
from bench.scenarios import WEBHOOK_TIMEOUT_SECONDS, BenchConfig, describe_layout, run

RESULTS = Path(__file__).resolve().parent / "results.json"


def _counts(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _api_timeout(text: str) -> float:
    """A webhook API deadline: positive, and below the webhooks' ``timeoutSeconds`` (the
    API server would give up on the webhook before the webhook gives up on its read)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < seconds < WEBHOOK_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{seconds:g} s: must be > 0 and < the webhooks' timeoutSeconds "
            f"({WEBHOOK_TIMEOUT_SECONDS:g} s)"
        )
    return seconds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny counts (proves the harness)")
    parser.add_argument(
        "--scenario",
        choices=("all", "fair-turns"),
        default="all",
        help="`fair-turns`: only both submit paths at their real cadences, fair turns off "
        "then on (bench/fair_turns.py; results to bench/results-fair-turns.json)",
    )
    parser.add_argument(
        "--fair-start",
        choices=("spread", "together"),
        default="spread",
        help="fair-turns: each path's tasks start spread over its cadence (default), or "
        "all at one instant (the dashboard's tasks then poll on one beat)",
    )
    parser.add_argument("--fair-searches", type=int, help="fair-turns: searches per path (6)")
    parser.add_argument("--jobs", type=_counts, help="Job counts, e.g. 0,30,300,3000")
    parser.add_argument("--repeats", type=int, help="runs per figure (default 3)")
    parser.add_argument("--requests", type=int, help="measured requests per saturation pass")
    parser.add_argument(
        "--large-latency-seconds",
        type=float,
        help="time limit of each latency pass from 1,000 Jobs on, per thing measured "
        "(default 4): at tens of thousands of Jobs a census LIST takes near a second, so "
        "the default gives a p99 of a handful of requests",
    )
    parser.add_argument(
        "--profile-at", type=_counts, default=(), help="py-spy the webhook at these Job counts"
    )
    parser.add_argument("--no-fast", action="store_true", help="skip the fast-path workloads")
    parser.add_argument("--no-controller", action="store_true", help="skip controller_bench")
    parser.add_argument(
        "--no-controller-scale",
        action="store_true",
        help="skip the real controller at each Job count (start-up, relist, leader change, RSS)",
    )
    parser.add_argument(
        "--no-capacity", action="store_true", help="skip admission with the capacity rule on"
    )
    parser.add_argument(
        "--finalizer-grace",
        type=int,
        help="BLAST_FINALIZER_GRACE_SECONDS of the measured webhooks (default 300): each "
        "Job count is measured once the fill's finishing finalizers are past it",
    )
    parser.add_argument(
        "--no-census-list",
        action="store_true",
        help="skip admission with ELB_GATE_CENSUS_READ=list (the census LIST the watch replaces)",
    )
    parser.add_argument(
        "--no-load",
        action="store_true",
        help="skip the cluster-load phase (API requests, handoff, bursts)",
    )
    parser.add_argument("--searches", type=int, help="searches of the elb-gate submit burst")
    parser.add_argument("--poll-searches", type=int, help="searches of the polling burst")
    parser.add_argument(
        "--submit-bursts", type=int, help="bursts of elb-gate submit, pooled (default 1)"
    )
    parser.add_argument("--search-seconds", type=float, help="how long each search's pods run")
    parser.add_argument(
        "--reclaim-runs", type=int, help="runs per dead-holder reclaim case (0: skip)"
    )
    parser.add_argument(
        "--order-requests",
        type=int,
        help="reviews per kind of the admission-order phase (0: skip)",
    )
    parser.add_argument(
        "--api-timeout",
        type=_api_timeout,
        metavar="SECONDS",
        help="the measured webhooks' API deadline (ELB_GATE_API_TIMEOUT_SECONDS; default: "
        "the webhook's own, 1.5 s); below their timeoutSeconds (5 s). A larger one measures "
        "a loaded control plane's slow census LIST as an admission, not a fail-closed 503",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results file")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs)")
    return parser.parse_args(argv)


def config_from(args: argparse.Namespace) -> BenchConfig:
    base = BenchConfig.quick() if args.quick else BenchConfig()
    sat = base.saturation
    if args.requests:
        sat = LoadPlan(sat.concurrency, args.requests, sat.warmup, sat.max_seconds)
    latency_large = base.latency_large
    if args.large_latency_seconds:
        latency_large = dataclasses.replace(latency_large, max_seconds=args.large_latency_seconds)
    load = base.load
    if load is not None:
        load = dataclasses.replace(
            load,
            searches=args.searches or load.searches,
            poll_searches=args.poll_searches or load.poll_searches,
            submit_bursts=args.submit_bursts or load.submit_bursts,
            search_seconds=args.search_seconds or load.search_seconds,
        )
    return dataclasses.replace(
        base,
        job_counts=args.jobs or base.job_counts,
        repeats=args.repeats or base.repeats,
        saturation=sat,
        latency_large=latency_large,
        profile_at=args.profile_at,
        fast_paths=not args.no_fast,
        capacity=not args.no_capacity,
        census_list=not args.no_census_list,
        controller_scale=not args.no_controller_scale,
        load=None if args.no_load else load,
        reclaim_runs=base.reclaim_runs if args.reclaim_runs is None else args.reclaim_runs,
        order_requests=base.order_requests if args.order_requests is None else args.order_requests,
        api_timeout_seconds=args.api_timeout,
        finalizer_grace_seconds=args.finalizer_grace,
    )


def controller_results(progress: Any) -> dict[str, Any] | None:
    """``bench.controller_bench.run()`` (the controller developer's), if it exists."""
    if importlib.util.find_spec("bench.controller_bench") is None:
        progress("bench/controller_bench.py does not exist (yet): controller figures skipped")
        return None
    progress("controller (bench.controller_bench.run)")
    from bench import controller_bench

    result: dict[str, Any] = controller_bench.run()
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def progress(message: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    if args.scenario == "fair-turns":
        return fair_turns_main(args, progress)
    config = config_from(args)

    machine = machine_info()
    workdir = scratch_dir()
    try:
        harness = run(config, workdir, progress)
    except Exception:
        progress(f"failed; logs kept in {workdir}")
        raise
    series = harness.series
    notes = list(series.notes)
    for key in ("burst_elb_gate", "burst_polling"):
        burst = (harness.load or {}).get(key)
        if not burst:
            continue
        for name, why in burst["failed"].items():
            notes.append(f"{burst['label']}: {name} did not submit: {why}")
        if burst["peak_active"] > 3:
            notes.append(f"{burst['label']}: {burst['peak_active']} searches active at once")
    controller = None
    if not args.no_controller:
        try:
            controller = controller_results(progress)
        except Exception:  # one broken part must not lose the webhook's numbers
            notes.append("controller_bench failed:\n" + traceback.format_exc(limit=3))
    machine["load_average_at_end"] = list(load_average())
    figures = all_figures(
        series,
        config.job_counts,
        harness.fast_workloads,
        controller,
        harness.load,
        harness.reclaim,
        harness.order,
        harness.controller_scale,
        harness.cluster.fills,
    )
    results = Results(
        figures=figures,
        machine=machine,
        settings={
            "job_counts": list(config.job_counts),
            "repeats": config.repeats,
            "passes": {
                name: dataclasses.asdict(getattr(config, name))
                for name in ("latency", "saturation", "latency_large", "saturation_large")
            },
            "large_from_jobs": config.large,
            "load": dataclasses.asdict(config.load) if config.load else None,
            "reclaim_runs": config.reclaim_runs,
            "order_requests": config.order_requests,
            "webhook_api_timeout_seconds": config.api_timeout,
            "webhook_finalizer_grace_seconds": config.finalizer_grace_seconds
            or FINALIZER_GRACE_SECONDS,
            "layout": describe_layout(harness),
        },
        raw={
            "series": {k: v for k, v in series.values.items()},
            "outcomes": {k: dict(v) for k, v in series.outcomes.items()},
            "profiles": series.profiles,
            "controller": controller,
            "load": harness.load,
            "reclaim": harness.reclaim,
            "admission_order": harness.order,
            "controller_scale": {str(k): v for k, v in harness.controller_scale.items()},
            "fills": harness.cluster.fills,
        },
        notes=notes,
    )
    print(format_table(figures, title=_title(machine, config)))
    for line in outcome_lines(series.outcomes, config.job_counts):
        print(line)
    for line in gc_lines(series.values, config.job_counts):
        print(line)
    for note in notes:
        print(f"note: {note}")
    for name, text in series.profiles.items():
        print(f"\nprofile of the webhook, {name}:\n{text}")
    write_results(args.out, results)
    if args.markdown:
        args.markdown.write_text(markdown_table(figures) + "\n")
    missed = [f.key for f in figures if f.met is False]
    print(f"\n{len(figures)} figures, {len(missed)} targets missed; written to {args.out}")
    if args.keep:
        print(f"scratch directory kept: {workdir}")
    else:
        remove(workdir)
    return 0


def outcome_lines(outcomes: Any, job_counts: tuple[int, ...]) -> list[str]:
    """Per Job count, how the measured search admissions were answered (``allowed``,
    ``denied-429`` …, ``http-…``): a latency is an admission's only where all were allowed;
    and how the measured webhook read the census in each pass (``watch (fenced)``, or a
    LIST and why) and how long its fenced reads' phases took (``wait over 0.1 s`` …)."""
    lines = []
    for n in job_counts:
        for server in ("hook", "list", "cap", "reads", "alone.hook"):
            pass_key = f"{server}.n{n}"
            for key in (pass_key, f"{pass_key}.census_reads", f"{pass_key}.census_fence"):
                counts = outcomes.get(key)
                if counts:
                    text = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                    lines.append(f"outcomes {key}: {text}")
    return lines


def gc_lines(values: dict[str, list[float]], job_counts: tuple[int, ...]) -> list[str]:
    """Per Job count and latency pass, the API server's garbage collection over it: a
    fenced read waits on the API server, and so on any collection running meanwhile."""
    lines = []
    for n in job_counts:
        for pass_key in (f"hook.n{n}", f"alone.hook.n{n}"):
            cycles = values.get(f"{pass_key}.apiserver_gc_cycles")
            if cycles:
                cpu = values[f"{pass_key}.apiserver_gc_cpu_ms"]
                live = values[f"{pass_key}.apiserver_heap_live_mb"]
                lines.append(
                    f"apiserver gc {pass_key}: cycles {sum(cycles):.0f}, "
                    f"cpu {sum(cpu):,.0f} ms, heap live {max(live):,.0f} MB"
                )
    return lines


def fair_turns_main(args: argparse.Namespace, progress: Any) -> int:
    """``--scenario fair-turns``: its own control plane, both modes, the table."""
    from bench import fair_turns
    from bench.cluster import BenchCluster

    config = fair_turns.FairConfig.quick() if args.quick else fair_turns.FairConfig()
    config = dataclasses.replace(
        config,
        stagger=args.fair_start == "spread",
        per_path=args.fair_searches or config.per_path,
    )
    machine = machine_info()
    workdir = scratch_dir()
    cluster = BenchCluster(workdir, cpu=None).start()
    try:
        report = fair_turns.run(cluster.control_plane, workdir, config, progress)
    except Exception:
        progress(f"failed; logs kept in {workdir}")
        raise
    finally:
        cluster.stop()
    machine["load_average_at_end"] = list(load_average())
    report["machine"] = machine
    text = fair_turns.table(report)
    print(text)
    out = args.out if args.out != RESULTS else RESULTS.with_name("results-fair-turns.json")
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if args.markdown:
        args.markdown.write_text(text + "\n")
    print(f"\nwritten to {out}")
    if not args.keep:
        remove(workdir)
    return 0


def _title(machine: dict[str, Any], config: BenchConfig) -> str:
    load = machine.get("load_average_at_start") or [float("nan")]
    return (
        f"elb-gate benchmarks — {machine['cpu_model']}, {machine['cores']} cores, "
        f"Python {machine['python']}, load {load[0]:.2f}; median of {config.repeats} runs "
        "[min..max]; ratio = value / baseline, per run"
    )


if __name__ == "__main__":
    sys.exit(main())
