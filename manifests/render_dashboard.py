"""Draw the Grafana dashboard as a PNG from a running Prometheus.

    python -m manifests.render_dashboard --prometheus http://127.0.0.1:9090 \\
        --out docs/dashboard.png [--minutes 30] [--namespace '.*']

Grafana itself is not needed: each panel's own PromQL (from
charts/elb-gate/dashboards/elb-gate.json, the file Grafana imports) is evaluated
against Prometheus' HTTP API, and the panels are drawn with matplotlib in the
dashboard's 24-column grid, with their titles, legends and units. What the PNG
shows is therefore what those queries return, not a mock-up.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "charts" / "elb-gate" / "dashboards" / "elb-gate.json"
GRID_COLUMNS = 24
ROW_INCHES = 0.42
WIDTH_INCHES = 20.0


@dataclass
class Series:
    """One line of a panel: its legend and its (unix time, value) points."""

    legend: str
    points: list[tuple[float, float]]


@dataclass
class PanelResult:
    """What one panel's queries returned."""

    title: str
    kind: str
    series: list[Series] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Prometheus:
    """The two HTTP API calls the renderer needs."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=self.timeout) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # a bad query: Prometheus says why in the body
            body = json.loads(exc.read() or b"{}")
            body.setdefault("error", str(exc))
        if body.get("status") != "success":
            raise RuntimeError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        """An instant query: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        data = self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        return list(data["result"]) if data["resultType"] == "vector" else []

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query: ``[{"metric": {...}, "values": [[t, "v"], ...]}, ...]``."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return list(self._get("/api/v1/query_range", params)["result"])


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    """The dashboard JSON Grafana imports."""
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def expand(expr: str, rate_interval: str, namespace: str, cluster: str = ".*") -> str:
    """Grafana's variables as Grafana would fill them for this rendering (the
    cluster variable's All by default: it matches series without the label too)."""
    return (
        expr.replace("$__rate_interval", rate_interval)
        .replace("${cluster}", cluster)
        .replace("$cluster", cluster)
        .replace("${namespace}", namespace)
        .replace("$namespace", namespace)
    )


def legend(template: str, labels: Mapping[str, str]) -> str:
    """``{{namespace}} {{reason}}`` → ``blast ceiling``; the label set when no template."""
    if template:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), template).strip()
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"


def with_gaps(points: list[tuple[float, float]], step: float) -> list[tuple[float, float]]:
    """A NaN where a step has no sample, so the line breaks there as Grafana draws it
    (a query such as ``… > 0`` returns only the steps where it holds)."""
    out: list[tuple[float, float]] = []
    for t, v in points:
        if out and t - out[-1][0] > 1.5 * step:
            out.append((out[-1][0] + step, math.nan))
        out.append((t, v))
    return out


def evaluate(
    panel: Mapping[str, Any],
    prom: Prometheus,
    start: float,
    end: float,
    step: float,
    rate_interval: str,
    namespace: str,
) -> PanelResult:
    """Run one panel's queries: a range for a time series, an instant otherwise."""
    result = PanelResult(panel["title"], panel["type"])
    for target in panel.get("targets", []):
        expr = expand(target["expr"], rate_interval, namespace)
        try:
            if panel["type"] == "timeseries":
                for item in prom.query_range(expr, start, end, step):
                    points = with_gaps([(float(t), float(v)) for t, v in item["values"]], step)
                    result.series.append(
                        Series(legend(target.get("legendFormat", ""), item["metric"]), points)
                    )
            else:
                for item in prom.query(expr, end):
                    t, v = item["value"]
                    result.series.append(
                        Series(
                            legend(target.get("legendFormat", ""), item["metric"]),
                            [(float(t), float(v))],
                        )
                    )
        except Exception as exc:  # shown on the panel and returned: a broken query must be visible
            result.errors.append(f"{target.get('refId', '?')}: {exc}")
    return result


def format_value(value: float, unit: str) -> str:
    """A value in the panel's unit, as Grafana would write it (roughly)."""
    if math.isnan(value):
        return "NaN"
    if unit == "dtdurations":
        sign = "-" if value < 0 else ""
        left = abs(int(value))
        days, left = divmod(left, 86400)
        hours, left = divmod(left, 3600)
        minutes, seconds = divmod(left, 60)
        parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")]
        shown = [f"{n}{u}" for n, u in parts if n][:2] or ["0s"]
        return sign + " ".join(shown)
    if unit == "s":
        if abs(value) < 1:
            return f"{value * 1000:.1f} ms"
        return f"{value:.2f} s"
    if unit == "reqps":
        return f"{value:.2f} req/s"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def _axis_formatter(unit: str) -> Callable[[float, int], str]:
    return lambda value, _pos: format_value(value, unit)


COLORS = {"green": "#73bf69", "orange": "#ff9830", "red": "#f2495c", "text": "#d8d9da"}


def stat_color(value: float, defaults: Mapping[str, Any]) -> str:
    """The colour of the threshold step ``value`` falls in (Grafana's absolute mode)."""
    color = "green"
    for step in (defaults.get("thresholds") or {}).get("steps", []):
        if step.get("value") is None or value >= step["value"]:
            color = step.get("color", color)
    return COLORS.get(color, color)


def draw(
    dashboard: Mapping[str, Any],
    results: Sequence[PanelResult],
    out: Path,
    subtitle: str,
    window: tuple[float, float] | None = None,
) -> None:
    """Lay the panels out in the dashboard's grid and write the PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter

    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    height = rows * ROW_INCHES + 0.8
    fig = plt.figure(figsize=(WIDTH_INCHES, height), dpi=100, facecolor="#111217")
    title_y = 1 - 0.25 / height
    fig.text(
        0.01, title_y, dashboard["title"], color="#e6e6e6", fontsize=16, weight="bold", va="top"
    )
    fig.text(0.99, title_y, subtitle, color="#9aa0a6", fontsize=9, ha="right", va="top")
    top = 1 - 0.7 / height
    unit_row = (top - 0.01) / rows
    inch_x, inch_y = 1 / WIDTH_INCHES, 1 / height
    span = (window[1] - window[0]) if window else 0.0
    time_format = "%H:%M" if span > 600 else "%H:%M:%S"
    for panel, result in zip(panels, results, strict=True):
        grid = panel["gridPos"]
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        unit = defaults.get("unit", "short")
        left = grid["x"] / GRID_COLUMNS + 0.003
        width = grid["w"] / GRID_COLUMNS - 0.006
        bottom = top - (grid["y"] + grid["h"]) * unit_row + 0.006
        box_height = grid["h"] * unit_row - 0.012
        fig.add_artist(
            Rectangle(
                (left, bottom),
                width,
                box_height,
                transform=fig.transFigure,
                facecolor="#181b1f",
                edgecolor="#2c3235",
                zorder=-10,  # behind the panel's axes, which the figure draws at 0
            )
        )
        fig.text(
            left + 0.1 * inch_x,
            bottom + box_height - 0.08 * inch_y,
            panel["title"],
            color=COLORS["text"],
            fontsize=10,
            va="top",
        )
        inner = (
            left + 0.75 * inch_x,
            bottom + 0.35 * inch_y,
            width - 0.9 * inch_x,
            box_height - 0.75 * inch_y,
        )
        if result.errors or result.kind != "timeseries":
            inner = (left, bottom, width, box_height - 0.35 * inch_y)
        ax = fig.add_axes(inner, facecolor="none")
        ax.tick_params(colors="#9aa0a6", labelsize=7)
        for spine in ax.spines.values():
            spine.set_visible(result.kind == "timeseries" and not result.errors)
            spine.set_color("#2c3235")
        if result.errors:
            ax.set_axis_off()
            ax.text(
                0.5,
                0.5,
                "\n".join(result.errors)[:300],
                color=COLORS["red"],
                ha="center",
                va="center",
                fontsize=8,
                wrap=True,
                transform=ax.transAxes,
            )
        elif result.kind == "timeseries":
            for series in result.series:
                xs = mdates.date2num([datetime.fromtimestamp(t, UTC) for t, _ in series.points])
                ax.plot(xs, [v for _, v in series.points], linewidth=1.4, label=series.legend)
            if window is not None:  # every panel over the same time range, as Grafana draws them
                ax.set_xlim(*mdates.date2num([datetime.fromtimestamp(t, UTC) for t in window]))
            ax.xaxis.set_major_formatter(mdates.DateFormatter(time_format))
            ax.yaxis.set_major_formatter(FuncFormatter(_axis_formatter(unit)))
            low, high = defaults.get("min"), defaults.get("max")
            if low is not None or high is not None:
                ax.set_ylim(
                    low if low is not None else None, (high * 1.05) if high is not None else None
                )
            ax.grid(color="#2c3235", linewidth=0.6)
            if result.series:
                ax.legend(
                    loc="upper left", fontsize=7, frameon=False, labelcolor=COLORS["text"], ncol=2
                )
            else:
                ax.text(
                    0.5,
                    0.5,
                    "No data",
                    color="#9aa0a6",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
        elif result.kind == "stat":
            ax.set_axis_off()
            shown = result.series[:3]
            if not shown:
                ax.text(
                    0.5,
                    0.5,
                    "No data",
                    color="#9aa0a6",
                    ha="center",
                    va="center",
                    fontsize=14,
                    transform=ax.transAxes,
                )
            for n, series in enumerate(shown):
                value = series.points[-1][1]
                x = (n + 0.5) / len(shown)
                ax.text(
                    x,
                    0.55,
                    format_value(value, unit),
                    color=stat_color(value, defaults),
                    ha="center",
                    va="center",
                    fontsize=20 if len(shown) == 1 else 14,
                    weight="bold",
                    transform=ax.transAxes,
                )
                ax.text(
                    x,
                    0.15,
                    series.legend,
                    color="#9aa0a6",
                    ha="center",
                    va="center",
                    fontsize=8,
                    transform=ax.transAxes,
                )
        else:  # table
            ax.set_axis_off()
            rows_text = [
                f"{s.legend:<64} {format_value(s.points[-1][1], unit)}" for s in result.series
            ]
            ax.text(
                0.02,
                0.95,
                "\n".join(rows_text[:10]) or "No data",
                color=COLORS["text"],
                ha="left",
                va="top",
                fontsize=9,
                family="monospace",
                transform=ax.transAxes,
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=fig.get_facecolor())
    plt.close(fig)


def render(
    prom: Prometheus,
    out: Path,
    *,
    end: float | None = None,
    minutes: float = 30.0,
    step: float | None = None,
    rate_interval: str | None = None,
    namespace: str = ".*",
    dashboard_path: Path = DASHBOARD,
) -> list[PanelResult]:
    """Evaluate every panel over the last ``minutes`` and write the PNG; returns the results."""
    dashboard = load_dashboard(dashboard_path)
    end = time.time() if end is None else end
    start = end - minutes * 60
    step = step or max(1.0, minutes * 60 / 240)
    rate_interval = rate_interval or f"{max(4 * step, 60 if minutes >= 10 else 4 * step):g}s"
    results = [
        evaluate(p, prom, start, end, step, rate_interval, namespace) for p in dashboard["panels"]
    ]
    stamp = datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d %H:%M UTC")
    draw(
        dashboard,
        results,
        out,
        f"{minutes:.3g} min to {stamp} · rate window {rate_interval}",
        window=(start, end),
    )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: render, print one line per panel, exit 1 if a query failed."""
    parser = argparse.ArgumentParser(
        prog="python -m manifests.render_dashboard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "dashboard.png")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument(
        "--namespace", default=".*", help="the dashboard's namespace variable (regex)"
    )
    args = parser.parse_args(argv)
    results = render(
        Prometheus(args.prometheus), args.out, minutes=args.minutes, namespace=args.namespace
    )
    for result in results:
        print(
            f"{result.title}: {len(result.series)} series"
            + (f", errors: {result.errors}" if result.errors else "")
        )
    print(f"wrote {args.out}")
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
