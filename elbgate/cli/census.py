"""``elb-gate census [-o table|json|yaml]``: the namespace's active searches, orphans,
ceiling and Lease holder — what the webhook would decide for a new search now.
Uses the webhook's own census function on the webhook's own LIST."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from elbgate.census import Census
from elbgate.client.observe import read_census, read_lease
from elbgate.durations import format_duration
from elbgate.lease import format_microtime
from elbgate.names import lease_name
from elbgate.settings import Settings

from . import exit_codes
from .connection import (
    add_output_flag,
    connect,
    environment,
    load_settings,
    render,
    require_namespace,
)
from .lease_report import describe_lease, lease_summary

HELP = "show active searches, orphans, ceiling and Lease holder"


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "census",
        help=HELP,
        description=HELP + " (what the admission webhook would decide now).",
        epilog=exit_codes.help_text(),
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_output_flag(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, command: list[str]) -> int:
    settings = load_settings(environment())
    conn = connect(args, settings)
    with conn.kube() as kube:
        require_namespace(kube, conn.namespace)
        now = datetime.now(UTC)
        seen = read_census(kube, conn.namespace, settings, now, exact_orphans=True)
        lease = read_lease(kube, conn.namespace)
    report = census_report(conn.namespace, seen, lease, settings, now)
    print(render(report, args.output, render_table))
    return exit_codes.OK


def census_report(
    namespace: str,
    seen: Census,
    lease: dict[str, Any] | None,
    settings: Settings,
    now: datetime,
) -> dict[str, Any]:
    """JSON-ready census, Lease and verdict (pure)."""
    summary = lease_summary(lease, lease_name(namespace), settings, now)
    ceiling = settings.max_run_concurrency
    searches = []
    for search in seen.active:
        ages = [a for a in (j.age_seconds(now) for j in search.jobs) if a is not None]
        searches.append(
            {
                "id": search.key,
                "ageSeconds": int(max(ages)) if ages else None,
                "reason": search.reason,
                "jobs": [f"{j.app}/{j.name}" for j in search.jobs],
            }
        )
    orphans = [
        {
            "name": j.name,
            "id": j.job_id or None,
            "ageSeconds": None if j.age_seconds(now) is None else int(j.age_seconds(now) or 0),
            "orphanedSince": j.orphaned_since or None,
        }
        for j in seen.orphans
    ]
    return {
        "namespace": namespace,
        "observedAt": format_microtime(now),
        "ceiling": ceiling,
        "active": seen.count,
        "searches": searches,
        "orphans": orphans,
        "finishing": [{"name": j.name, "id": j.job_id or None} for j in seen.finishing],
        "lease": summary,
        "verdict": verdict(seen.count, ceiling, summary),
    }


def verdict(active: int, ceiling: int, lease: dict[str, Any]) -> str:
    """What the webhook would say to a Job opening a new search right now."""
    if active >= ceiling:
        return f"a new search would be denied by Gate B: {active}/{ceiling} active (at ceiling)"
    if lease["state"] != "held":
        return (
            f"a new search would be denied by Gate A: nobody holds the Lease "
            f"({active}/{ceiling} active; a submitter must acquire it first)"
        )
    return (
        f"a new search would be admitted only for the Lease holder {lease['holder']} "
        f"({active}/{ceiling} active)"
    )


def _age(seconds: int | None) -> str:
    return "?" if seconds is None else format_duration(seconds)


def render_table(report: dict[str, Any]) -> str:
    """The human view of :func:`census_report`."""
    lines = [
        f"namespace {report['namespace']}: {report['active']}/{report['ceiling']} active, "
        f"{len(report['orphans'])} orphaned finalizer(s)",
        describe_lease(report["lease"]),
        f"verdict: {report['verdict']}",
        "",
    ]
    if report["searches"]:
        rows = [("SEARCH", "AGE", "JOBS", "WHY ACTIVE")]
        rows += [
            (s["id"], _age(s["ageSeconds"]), ", ".join(s["jobs"]), s["reason"])
            for s in report["searches"]
        ]
        lines += _columns(rows)
    else:
        lines.append("no active searches")
    if report["orphans"]:
        lines.append("")
        rows = [("ORPHANED FINALIZER", "SEARCH", "AGE", "FLAGGED SINCE")]
        rows += [
            (o["name"], o["id"] or "-", _age(o["ageSeconds"]), o["orphanedSince"] or "-")
            for o in report["orphans"]
        ]
        lines += _columns(rows)
    if report["finishing"]:
        lines.append("")
        lines.append(
            "finishing (batch work done, merging; no slot, never collected): "
            + ", ".join(f["name"] for f in report["finishing"])
        )
    return "\n".join(lines)


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
