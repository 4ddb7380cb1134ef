"""Figures, the printed table and ``bench/results.json``. Pure except :func:`write_results`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from bench.stats import Spread, spread


@dataclass(frozen=True, slots=True)
class Target:
    """A bound a figure must meet, on its value or on its ratio to the baseline."""

    limit: float
    on: Literal["value", "ratio"] = "value"
    at_most: bool = True
    """True: the figure must be <= limit; False: >= limit."""

    def met(self, value: float, ratio: float) -> bool | None:
        """``None`` when the figure it applies to could not be measured."""
        x = ratio if self.on == "ratio" else value
        if math.isnan(x):
            return None
        return x <= self.limit if self.at_most else x >= self.limit

    def text(self, unit: str) -> str:
        sign = "<=" if self.at_most else ">="
        if self.on == "ratio":
            return f"{sign} {self.limit:g}x"
        return f"{sign} {self.limit:g}{_unit_suffix(unit)}"


@dataclass(frozen=True, slots=True)
class Figure:
    """One row: a measured value (over repeated runs), what it is compared with, and
    whether it meets its target."""

    key: str
    """Stable identifier (``search.n30.p50``), the key in results.json."""
    label: str
    value: Spread
    unit: str
    baseline: Spread | None = None
    baseline_label: str = ""
    ratio: Spread | None = None
    """value / baseline, taken per run (each run is paired with a baseline run made
    moments apart), then the median: machine noise cancels in the pair."""
    target: Target | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        r = self.ratio.median if self.ratio is not None else math.nan
        return self.target.met(self.value.median, r)


def paired(
    key: str,
    label: str,
    values: Sequence[float],
    unit: str,
    baselines: Sequence[float] | None = None,
    baseline_label: str = "",
    target: Target | None = None,
    note: str = "",
) -> Figure:
    """A :class:`Figure` from per-run values and (optionally) per-run baselines."""
    base = spread(baselines) if baselines else None
    ratios = None
    if baselines:
        if len(baselines) == len(values):
            pairs = zip(values, baselines, strict=True)
            ratios = spread([v / b if b else math.nan for v, b in pairs])
        else:  # unpaired (e.g. one baseline for many runs): ratio of medians
            med = spread(values).median
            ratios = spread([med / base.median] if base and base.median else [])
    return Figure(key, label, spread(values), unit, base, baseline_label, ratios, target, note)


def _unit_suffix(unit: str) -> str:
    return unit if unit.startswith("/") or unit == "x" else f" {unit}"


def _number(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


def show(s: Spread | None, unit: str) -> str:
    """``12.3 ms [11.9..13.0]``: the median, and the range when there were several runs."""
    if s is None:
        return ""
    text = _number(s.median) + ("" if not unit else _unit_suffix(unit))
    if s.runs > 1 and not math.isnan(s.low):
        text += f" [{_number(s.low)}..{_number(s.high)}]"
    return text


HEADER = ("figure", "value", "baseline", "ratio", "target", "met?")


def table_rows(figures: Iterable[Figure]) -> list[tuple[str, ...]]:
    """The cells of each row, as printed."""
    rows: list[tuple[str, ...]] = []
    for f in figures:
        base = f"{show(f.baseline, f.unit)} ({f.baseline_label})" if f.baseline else ""
        ratio = show(f.ratio, "x") if f.ratio is not None else ""
        target = f.target.text(f.unit) if f.target else ""
        met = {True: "yes", False: "NO", None: "" if f.target is None else "n/a"}[f.met]
        rows.append((f.label, show(f.value, f.unit), base, ratio, target, met))
    return rows


def format_table(figures: Iterable[Figure], title: str = "") -> str:
    """A fixed-width text table (also valid Markdown when ``markdown`` rendering is
    not wanted); :func:`markdown_table` gives the docs version."""
    rows = [HEADER, *table_rows(figures)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = [title] if title else []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(figures: Iterable[Figure]) -> str:
    """The same rows as a Markdown table (for docs/benchmarks.md)."""
    rows = table_rows(figures)
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
    return "\n".join(out)


def _spread_doc(s: Spread | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"median": s.median, "min": s.low, "max": s.high, "runs": s.runs}


def figure_doc(f: Figure) -> dict[str, Any]:
    """One figure as results.json stores it (NaN becomes null)."""
    return _nan_to_none(
        {
            "label": f.label,
            "unit": f.unit,
            "value": _spread_doc(f.value),
            "baseline": _spread_doc(f.baseline),
            "baseline_label": f.baseline_label or None,
            "ratio": _spread_doc(f.ratio),
            "target": (
                {"limit": f.target.limit, "on": f.target.on, "at_most": f.target.at_most}
                if f.target
                else None
            ),
            "met": f.met,
            "note": f.note or None,
        }
    )


@dataclass
class Results:
    """Everything one run produced, ready for results.json."""

    figures: list[Figure] = field(default_factory=list)
    machine: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return _nan_to_none(
            {
                "machine": dict(self.machine),
                "settings": dict(self.settings),
                "figures": {f.key: figure_doc(f) for f in self.figures},
                "targets_missed": [f.key for f in self.figures if f.met is False],
                "notes": list(self.notes),
                "raw": dict(self.raw),
            }
        )


def write_results(path: Path, results: Results) -> None:
    """Write results.json (pretty, stable key order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        orjson.dumps(results.document(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    )


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj
