"""Seed lists and the roll-up of schedule results into the ledger (shared by the
bounded test and ``make soak``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tests.reliability.ledger import Ledger
from tests.reliability.scheduler import ScheduleResult

CI_SEEDS: tuple[int, ...] = tuple(range(1001, 1053))
"""52 fixed seeds for the bounded run in ``make test``."""
NAMESPACE_SLOTS = 8
"""Schedules that run at once in CI (each in its own namespace)."""


def summarize(results: Iterable[ScheduleResult], ledger: Ledger) -> dict[str, int | str]:
    """Record schedules under promise 1; return the totals (for printing)."""
    results = list(results)
    protocols: Counter[str] = Counter()
    reclaimed: Counter[str] = Counter()
    denials: Counter[int] = Counter()
    for r in results:
        protocols.update(r.protocols)
        reclaimed.update(r.reclaimed)
        denials.update(r.denials)
    totals: dict[str, int | str] = {
        "schedules": len(results),
        "submitters": sum(r.submitters for r in results),
        "writes_observed": sum(r.writes for r in results),
        "searches_ran": sum(r.searches_ran for r in results),
        "crashes": sum(r.crashes for r in results),
        "gate_a_checks": sum(r.gate_a_checked for r in results),
        "intrusions": sum(r.intrusions for r in results),
        "intrusions_refused": sum(r.intrusions_refused for r in results),
        "max_active": max((r.max_active for r in results), default=0),
        "max_live_holders": max((r.max_live_holders for r in results), default=0),
        "protocols": " ".join(f"{k}:{v}" for k, v in sorted(protocols.items())),
        "reclaimed": " ".join(f"{k}:{v}" for k, v in sorted(reclaimed.items())),
        "denials": " ".join(f"{k}:{v}" for k, v in sorted(denials.items())),
    }
    violations = sum(len(r.violations) for r in results)
    ledger.record(
        "1",
        runs=len(results),
        faults=totals["crashes"] if isinstance(totals["crashes"], int) else 0,
        violations=violations,
        **{
            k: v
            for k, v in totals.items()
            if k not in ("schedules", "max_active", "max_live_holders")
        },
    )
    ledger.maximum(
        "1", max_active=int(totals["max_active"]), max_live_holders=int(totals["max_live_holders"])
    )
    return totals
