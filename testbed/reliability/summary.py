"""Roll schedule results up into the ledger (shared by the bounded test and ``make soak``)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from testbed.reliability.ledger import Ledger
from testbed.reliability.scheduler import ScheduleResult


def _pairs(counts: Mapping[Any, object]) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: str(kv[0])))


def tally(results: Iterable[ScheduleResult], name: str) -> Counter[Any]:
    """The results' Counters called ``name``, added up."""
    return sum((getattr(r, name) for r in results), Counter())


def reclaim_timing(results: Iterable[ScheduleResult]) -> dict[str, str]:
    """Per way of dying: the median and the longest seconds from a death to the write
    that freed its hold (``median/max``)."""
    seconds: dict[str, list[float]] = defaultdict(list)
    for death, s in (pair for r in results for pair in r.reclaim_seconds):
        seconds[death].append(s)
    return {d: f"{statistics.median(v):.1f}/{max(v):.1f}" for d, v in sorted(seconds.items())}


def summarize(
    results: Iterable[ScheduleResult], ledger: Ledger, served: Sequence[int] = ()
) -> dict[str, int | str]:
    """Record schedules under promise 1, with the admissions each of the two webhook
    replicas ``served`` (from its /metrics); return the totals (for printing)."""
    results = list(results)
    stalls, fates = tally(results, "stalls"), tally(results, "job_fates")
    totals: dict[str, int | str] = {
        "schedules": len(results),
        "submitters": sum(r.submitters for r in results),
        "job_events_checked": sum(r.job_events for r in results),
        "lease_writes_checked": sum(r.lease_writes for r in results),
        "gate_a_creates_checked": sum(r.gate_a_checked for r in results),
        "census_disagreements": sum(r.disagreements for r in results),
        "searches_ran": sum(r.searches_ran for r in results),
        "deaths": sum(r.crashes for r in results),
        "takeovers": sum(r.takeovers for r in results),
        "stalls": sum(stalls.values()),
        "stalls_refused_on_waking": sum(r.stalls_refused for r in results),
        "stalls_admitted_by_a_siblings_hold": sum(r.stalls_admitted_by_sibling for r in results),
        "stalled_hold_ended": _pairs(stalls),
        "intrusions": sum(r.intrusions for r in results),
        "intrusions_refused": sum(r.intrusions_refused for r in results),
        "intrusions_admitted_by_a_siblings_hold": sum(r.intrusions_by_sibling for r in results),
        "max_active_oracle": max((r.max_active for r in results), default=0),
        "max_active_crude": max((r.max_crude for r in results), default=0),
        "max_live_holders": max((r.max_live_holders for r in results), default=0),
        "protocols": _pairs(tally(results, "protocols")),
        "deaths_by_mode": _pairs(tally(results, "deaths")),
        "hold_ended": _pairs(tally(results, "reclaimed")),
        "reclaim_seconds_median_max": _pairs(reclaim_timing(results)),
        "job_fates": _pairs(fates),
        "denials": _pairs(tally(results, "denials")),
    }
    ledger.record(
        "1",
        runs=len(results),
        faults=int(totals["deaths"]) + sum(v for k, v in fates.items() if not k.endswith(":ok")),
        violations=sum(len(r.violations) for r in results),
        **{k: v for k, v in totals.items() if k != "schedules" and not k.startswith("max_")},
    )
    ledger.maximum("1", **{k: int(v) for k, v in totals.items() if k.startswith("max_")})
    if served:
        ledger.record("1", replica_a_admissions=served[0], replica_b_admissions=served[1])
    return totals
