"""``elb-gate census [-o table|json|yaml]``: the namespace's active searches, orphans,
databases being staged, ceiling (with what the pool's nodes hold) and Lease holder —
what the webhook would decide for a new search now. Uses the webhook's own census
function on the webhook's own LIST, and its capacity arithmetic on the same Nodes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from client.errors import CoordinationError
from client.observe import read_census, read_lease, read_pool_nodes, read_split_searches
from elbgate import quantity
from elbgate.capacity import Ceiling, NodeView, PodShape, effective_ceiling, selected
from elbgate.census import Census
from elbgate.durations import format_duration
from elbgate.lease import format_microtime
from elbgate.names import lease_name
from elbgate.selectors import parse_selector
from elbgate.settings import GateSettings, RuleSettings

from . import exit_codes
from .connection import (
    add_command,
    add_output_flag,
    connect,
    environment,
    load_settings,
    render,
    require_namespace,
)
from .lease_report import describe_lease, lease_summary

HELP = "show active searches, orphans, DB staging, ceiling and capacity, and Lease holder"


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "census",
        parents,
        help=HELP,
        description=HELP + " (what the admission webhook would decide now).",
        exits=[exit_codes.CENSUS],
    )
    add_output_flag(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, command: list[str]) -> int:
    settings = load_settings(environment())
    conn = connect(args, settings)
    with conn.kube() as kube:
        require_namespace(kube, conn.namespace)
        now = datetime.now(UTC)
        seen = read_census(kube, conn.namespace, settings.gate, now, exact_orphans=True)
        lease = read_lease(kube, conn.namespace)
        splits = read_split_searches(kube, conn.namespace)
        try:
            nodes: tuple[NodeView, ...] | str = read_pool_nodes(kube, settings.rules)
        except CoordinationError as exc:
            nodes = str(exc)  # shown in the report; the census itself stands
    report = census_report(
        conn.namespace, seen, lease, settings.gate, settings.rules, now, nodes, splits
    )
    print(render(report, args.output, render_table))
    return exit_codes.OK


def pool_ceiling(gate: GateSettings, rules: RuleSettings, nodes: tuple[NodeView, ...]) -> Ceiling:
    """The ceiling a new search meets at the settings' batch pod shape
    (``ELB_GATE_CAPACITY_POD_CPU``/``_MEMORY``) on the pool's nodes."""
    shape = PodShape(
        quantity.millicores(rules.capacity_pod_cpu),
        quantity.bytes_of(rules.capacity_pod_memory),
        "ELB_GATE_CAPACITY_POD_CPU/_MEMORY",
    )
    pool = selected(nodes, parse_selector(rules.capacity_pool_selector))
    return effective_ceiling(gate.max_run_concurrency, pool, shape, rules.capacity_nodes_per_search)


def capacity_report(
    gate: GateSettings, rules: RuleSettings, nodes: tuple[NodeView, ...] | str | None
) -> dict[str, Any]:
    """What the pool's nodes hold (``nodes``: the pool, or why it could not be read)."""
    out: dict[str, Any] = {
        "rule": rules.capacity,
        "pool": rules.capacity_pool_selector or None,
    }
    if nodes is None or isinstance(nodes, str):
        out["error"] = nodes or "nodes not read"
        return out
    ceiling = pool_ceiling(gate, rules, nodes)
    out.update(
        {
            "readyNodes": ceiling.pool.nodes,
            "podShape": ceiling.shape.text,
            "nodeDerived": ceiling.node_derived,
            "effectiveCeiling": ceiling.effective,
            "explanation": ceiling.explanation,
        }
    )
    return out


def census_report(
    namespace: str,
    seen: Census,
    lease: dict[str, Any] | None,
    gate: GateSettings,
    rules: RuleSettings,
    now: datetime,
    nodes: tuple[NodeView, ...] | str | None = None,
    splits: dict[str, str] | str | None = None,
) -> dict[str, Any]:
    """JSON-ready census, DB staging, capacity, Lease and verdict (pure). ``nodes``:
    the pool's Nodes, or why they could not be read (``None``: not read). ``splits``:
    the admission record's split shards, or why it could not be read; a search's
    ``split`` is then its split holder prefix, ``None`` (not a shard) or, when the
    record was not read, ``"unknown"``."""
    split_of = splits if isinstance(splits, dict) else None
    summary = lease_summary(lease, lease_name(namespace), gate, now)
    capacity = capacity_report(gate, rules, nodes)
    ceiling = gate.max_run_concurrency
    if rules.capacity != "off" and capacity.get("effectiveCeiling") is not None:
        ceiling = int(capacity["effectiveCeiling"])
    searches = []
    for search in seen.active:
        ages = [a for a in (j.age_seconds(now) for j in search.jobs) if a is not None]
        searches.append(
            {
                "id": search.key,
                "ageSeconds": int(max(ages)) if ages else None,
                "reason": search.reason,
                "jobs": [f"{j.app}/{j.name}" for j in search.jobs],
                "split": _split(split_of, search.key),
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
    staging = [{"db": s.db, "by": s.key, "jobs": [j.name for j in s.jobs]} for s in seen.staging]
    return {
        "namespace": namespace,
        "observedAt": format_microtime(now),
        "ceiling": ceiling,
        "active": seen.count,
        "searches": searches,
        "orphans": orphans,
        "finishing": [{"name": j.name, "id": j.job_id or None} for j in seen.finishing],
        "staging": staging,
        "configuredCeiling": gate.max_run_concurrency,
        "splitShards": sum(1 for s in searches if s["split"] not in (None, "unknown")),
        "splitRecordError": splits if isinstance(splits, str) else None,
        "capacity": capacity,
        "lease": summary,
        "verdict": verdict(
            seen.count, ceiling, summary, by_nodes=ceiling < gate.max_run_concurrency
        ),
    }


def _split(splits: dict[str, str] | None, key: str) -> str | None:
    """``key``'s split holder prefix, ``None`` when not a shard, ``"unknown"`` unread."""
    if splits is None:
        return "unknown"
    mark = splits.get(key)
    return mark.split(" ", 1)[1] if mark and " " in mark else None


def verdict(active: int, ceiling: int, lease: dict[str, Any], *, by_nodes: bool = False) -> str:
    """What the webhook would say to a Job opening a new search right now
    (``by_nodes``: the ceiling is the nodes', the capacity rule would refuse)."""
    if active >= ceiling:
        if by_nodes:
            return (
                f"a new search would be denied by the capacity rule: {active}/{ceiling} "
                "active (what the pool's nodes hold)"
            )
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
        rows = [("SEARCH", "AGE", "SPLIT", "JOBS", "WHY ACTIVE")]
        rows += [
            (
                s["id"],
                _age(s["ageSeconds"]),
                s["split"] or "-",
                ", ".join(s["jobs"]),
                s["reason"],
            )
            for s in report["searches"]
        ]
        lines += _columns(rows)
    else:
        lines.append("no active searches")
    if report["orphans"]:
        lines.append("")
        orphan_rows = [("ORPHANED FINALIZER", "SEARCH", "AGE", "FLAGGED SINCE")]
        orphan_rows += [
            (o["name"], o["id"] or "-", _age(o["ageSeconds"]), o["orphanedSince"] or "-")
            for o in report["orphans"]
        ]
        lines += _columns(orphan_rows)
    if report["finishing"]:
        lines.append("")
        lines.append(
            "finishing (batch work done, merging; no slot, never collected): "
            + ", ".join(f["name"] for f in report["finishing"])
        )
    lines.append("")
    if report["staging"]:
        staged: list[tuple[str, ...]] = [("DB STAGING", "BY", "SETUP JOBS")]
        staged += [(s["db"], s["by"], ", ".join(s["jobs"])) for s in report["staging"]]
        lines += _columns(staged)
    else:
        lines.append("no database being staged")
    lines.append(describe_capacity(report["capacity"]))
    return "\n".join(lines)


def describe_capacity(capacity: dict[str, Any]) -> str:
    """One line: the capacity rule's mode and what the pool's nodes hold."""
    where = f"pool {capacity['pool']}" if capacity.get("pool") else "every node"
    head = f"capacity (rule {capacity['rule']}, {where})"
    if "error" in capacity:
        return f"{head}: unknown ({capacity['error']})"
    return f"{head}: {capacity['explanation']}"


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
