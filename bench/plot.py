"""``python -m bench.plot results.json out.png``: the curve over the Job counts of one
run (docs/benchmarks.md) — search admission, the API server's CPU per admission, and the
real controller's start-up, relist, memory and bytes read — drawn with matplotlib."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson


def _median(values: list[float]) -> float:
    ordered = sorted(v for v in values if v == v)
    if not ordered:
        return float("nan")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def curve(doc: dict[str, Any]) -> dict[str, list[float]]:
    """The plotted series, one value per Job count (``nan`` where not measured)."""
    counts = list(doc["settings"]["job_counts"])
    series = doc["raw"]["series"]
    scale = doc["raw"].get("controller_scale") or {}

    def s(key: str) -> list[float]:
        return [_median(series.get(key.format(n=n), [])) for n in counts]

    def c(key: str, factor: float = 1.0) -> list[float]:
        return [float((scale.get(str(n)) or {}).get(key, float("nan"))) * factor for n in counts]

    return {
        "jobs": [float(n) for n in counts],
        "p50_ms": s("alone.hook.n{n}.p50_ms"),
        "p99_ms": s("alone.hook.n{n}.p99_ms"),
        "among_lists_p99_ms": s("hook.n{n}.p99_ms"),
        "list_p50_ms": s("list.n{n}.p50_ms"),
        "list_p99_ms": s("list.n{n}.p99_ms"),
        "webhook_cpu_us": s("hook.n{n}.cpu_us"),
        "apiserver_cpu_us": s("hook.n{n}.apiserver_cpu_us"),
        "list_apiserver_cpu_us": s("list.n{n}.apiserver_cpu_us"),
        "synced_s": c("startup_to_synced_s"),
        "relist_s": c("relist_s"),
        "steady_mb": c("steady_rss_after_relist_mb"),
        "peak_mb": c("peak_rss_mb"),
        "relist_mb": c("live_list_bytes", 1e-6),
        "relist_wire_mb": c("relist_bytes", 1e-6),
        "unfiltered_mb": c("unfiltered_list_bytes", 1e-6),
    }


def draw(doc: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = curve(doc)
    x = list(range(len(data["jobs"])))
    labels = [f"{int(n):,}" for n in data["jobs"]]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    panels = [
        (
            axes[0][0],
            "search admission latency",
            "ms",
            [
                ("p50, census at a fence", "p50_ms"),
                ("p99, census at a fence", "p99_ms"),
                ("p99, at a fence between LISTs", "among_lists_p99_ms"),
                ("p50, census LIST", "list_p50_ms"),
                ("p99, census LIST", "list_p99_ms"),
            ],
        ),
        (
            axes[0][1],
            "CPU per search admission",
            "µs",
            [
                ("webhook", "webhook_cpu_us"),
                ("API server + etcd", "apiserver_cpu_us"),
                ("API server + etcd, census LIST", "list_apiserver_cpu_us"),
            ],
        ),
        (
            axes[1][0],
            "controller: time to synced",
            "s",
            [("start-up", "synced_s"), ("relist after 410", "relist_s")],
        ),
        (
            axes[1][1],
            "controller: memory and bytes per relist",
            "MB",
            [
                ("RSS steady", "steady_mb"),
                ("RSS peak", "peak_mb"),
                ("bytes per relist, decoded", "relist_mb"),
                ("bytes per relist on the wire (gzip)", "relist_wire_mb"),
                ("one unfiltered LIST", "unfiltered_mb"),
            ],
        ),
    ]
    for ax, title, unit, lines in panels:
        for label, key in lines:
            ax.plot(x, data[key], marker="o", label=label)
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.set_xticks(x, labels)
        ax.set_xlabel("Jobs in the namespace")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for ax, _title, _unit, lines in panels:
        values = [v for _label, key in lines for v in data[key] if v == v and v > 0]
        if values and ax is not axes[1][0]:  # spans orders of magnitude; time does not
            ax.set_yscale("log")
    machine = doc.get("machine") or {}
    fig.suptitle(
        f"elb-gate at 0 to {labels[-1]} Jobs in one namespace: one run, "
        f"{machine.get('cores', '?')} cores ({machine.get('date', '')})",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    draw(orjson.loads(Path(argv[0]).read_bytes()), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
