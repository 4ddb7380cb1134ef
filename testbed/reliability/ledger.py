"""The numbers behind each promise: runs, faults injected, violations.

Every test (and the soak) records what it proved into one :class:`Ledger`; the
pytest plugin prints it as a table at the end of the session and ``make soak``
writes it to ``RESULTS.md``. A promise holds when its violations are 0.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

PROMISES: dict[str, str] = {
    "1": "never over-admit, never two holders",
    "2": "fail closed under API faults",
    "3": "bad input never crashes or admits",
    "4": "identity and TLS",
    "5": "restarts and rotation under load",
}


@dataclass
class Row:
    """One promise's running totals."""

    promise: str
    runs: int = 0
    faults: int = 0
    violations: int = 0
    notes: dict[str, int | float | str] = field(default_factory=dict)


class Ledger:
    """Thread-safe totals per promise, with free-form counters (``notes``) per promise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: dict[str, Row] = {}

    def record(
        self,
        promise: str,
        *,
        runs: int = 0,
        faults: int = 0,
        violations: int = 0,
        **notes: int | float | str,
    ) -> None:
        """Add to ``promise``'s totals; numeric notes are summed, text notes replaced."""
        with self._lock:
            row = self.rows.setdefault(promise, Row(promise))
            row.runs += runs
            row.faults += faults
            row.violations += violations
            for key, value in notes.items():
                old = row.notes.get(key)
                if isinstance(value, (int, float)) and isinstance(old, (int, float)):
                    row.notes[key] = old + value
                else:
                    row.notes[key] = value

    def maximum(self, promise: str, **notes: int | float) -> None:
        """Keep the largest value seen for each note (e.g. the most active searches)."""
        with self._lock:
            row = self.rows.setdefault(promise, Row(promise))
            for key, value in notes.items():
                old = row.notes.get(key)
                row.notes[key] = value if not isinstance(old, (int, float)) else max(old, value)

    def table(self) -> str:
        """A Markdown table, one line per promise, then each promise's counters."""
        with self._lock:
            rows = [self.rows[k] for k in sorted(self.rows)]
        cells = [
            (f"{r.promise}. {PROMISES.get(r.promise, '')}".strip(), r.runs, r.faults, r.violations)
            for r in rows
        ]
        lines = markdown_table("promise | runs | faults injected | violations", "lrrr", cells)
        details = []
        for row in (r for r in rows if r.notes):
            notes = sorted(row.notes.items())
            shown = ", ".join(
                f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in notes
            )
            details.append(f"- {row.promise}: {shown}")
        return "\n".join(lines + (["", *details] if details else []))


def markdown_table(head: str, align: str, rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table under ``head`` (its cells between ``|``); ``align`` has an ``l``
    (left) or ``r`` (right) per column."""
    return [
        f"| {head} |",
        "|" + "".join("---:|" if a == "r" else "---|" for a in align),
        *(f"| {' | '.join(map(str, row))} |" for row in rows),
    ]


LEDGER = Ledger()
"""The session's ledger (one per process: pytest session or soak run)."""
