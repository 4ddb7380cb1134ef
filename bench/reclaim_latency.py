"""Dead-holder reclaim latency at the default settings: for each way a submit Lease's
holder can end (docs/holder-gone.md), the worst time from the evidence to the controller
clearing the holder, as a ratio to the 15 s target; and for a holder that simply stops
renewing (``expired``), the time from the Lease's expiry to the reclaim, against 1 s.

Runs on the real control plane (``localkube``): the shipped webhook and one controller at
their default settings (30 s resync, 15 s leader Lease, 10 s NotReady bound, no reclaim
grace), holders acquiring through the webhook from Pods of their own so the Lease stamps
are real. Each case runs ``runs`` times (:data:`testbed.holders.CASES`); the reclaim time
is the API server's (audit log), the evidence time the case's own.

``run() -> dict`` is what the bench harness calls; alone:
``python -m bench.reclaim_latency [--runs N]`` (``ELB_GATE_CONTROL_PLANE=<dir>`` reuses a
running control plane, as the tests do). Numbers are measured, never asserted here.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from testbed import holders
from testbed.controlplane import ControlPlane
from testbed.webhook_process import WebhookProcess

DEFAULT_RUNS = 3


def run(
    runs: int = DEFAULT_RUNS,
    cases: Sequence[str] = tuple(holders.CASES),
    progress: Callable[[str], None] = lambda _m: None,
    cp: ControlPlane | None = None,
) -> dict[str, Any]:
    """Measure every case ``runs`` times; per case the worst seconds and its ratio to
    :data:`testbed.holders.TARGET_SECONDS`, the median, and each run's evidence label.
    ``cp``: the control plane to use (``make bench`` passes its own); by default the
    session's (started here and stopped at the end unless attached)."""
    owned = cp is None
    cp = cp or ControlPlane.for_session()
    namespaces: dict[str, str] = {}
    try:
        with WebhookProcess(cp) as hook:
            namespaces.update({c: hook.install.gate(cp.new_namespace(_dns(c))) for c in cases})
            with holders.controllers(cp, list(namespaces.values())) as stage:
                measured: dict[str, list[holders.Reclaim]] = {c: [] for c in cases}
                for i in range(runs):
                    for case in cases:
                        started = time.monotonic()
                        reclaim = holders.CASES[case](stage, namespaces[case])
                        measured[case].append(reclaim)
                        progress(
                            f"{case} run {i + 1}/{runs}: {reclaim.seconds:.3f}s "
                            f"({reclaim.evidence}; case took {time.monotonic() - started:.1f}s)"
                        )
    finally:
        if owned:
            cp.stop()
        else:
            for namespace in namespaces.values():
                cp.admin.delete("namespaces", None, namespace)
    out: dict[str, Any] = {
        "target_seconds": holders.TARGET_SECONDS,
        "runs": runs,
        "cases": {},
    }
    for case, reclaims in measured.items():
        seconds = sorted(r.seconds for r in reclaims)
        worst = seconds[-1]
        out["cases"][case] = {
            "worst_seconds": round(worst, 3),
            "median_seconds": round(seconds[len(seconds) // 2], 3),
            "target_seconds": holders.target_seconds(case),
            "worst_ratio": round(worst / holders.target_seconds(case), 3),
            "evidence": sorted({r.evidence for r in reclaims}),
        }
    return out


def format_table(result: dict[str, Any]) -> str:
    """The per-case table ``make bench`` prints."""
    lines = [
        f"dead-holder reclaim at the default settings, worst of {result['runs']} runs "
        f"(ratio = worst / target: {result['target_seconds']:g} s from the evidence, "
        f"{holders.EXPIRY_TARGET_SECONDS:g} s from the expiry)",
        f"  {'case':28} {'worst s':>8} {'median s':>9} {'ratio':>6}  evidence",
    ]
    for case, row in result["cases"].items():
        lines.append(
            f"  {case:28} {row['worst_seconds']:8.3f} {row['median_seconds']:9.3f} "
            f"{row['worst_ratio']:6.3f}  {','.join(row['evidence'])}"
        )
    return "\n".join(lines)


def _dns(case: str) -> str:
    return case.replace("_", "-")[:24]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reclaim_latency", description=__doc__)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per case")
    parser.add_argument(
        "--case", action="append", choices=sorted(holders.CASES), help="only these cases"
    )
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(f"[reclaim {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    result = run(args.runs, args.case or tuple(holders.CASES), progress)
    print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
