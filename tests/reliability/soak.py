"""``make soak``: the long runs, with the numbers written to ``tests/reliability/RESULTS.md``.

    python -m tests.reliability.soak                 # 1,000 schedules + fault trials
    python -m tests.reliability.soak --schedules 2000 --parallel 10 --fault-trials 400

Runs promise 1's randomized schedules (>= 1,000 by default) on one rig, then promise
2's fault trials on a rig of their own, prints the counts as it goes and the summary
table at the end, and exits non-zero on any violation (each one is printed).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.kube_emulator import User
from tests.reliability.cluster import Rig
from tests.reliability.fault_trials import (
    CONTROLLER_NS,
    FAULTY_ENV,
    WEBHOOK_NS,
    controller_trial,
    webhook_trial,
)
from tests.reliability.ledger import LEDGER
from tests.reliability.scheduler import Runner, ScheduleResult
from tests.reliability.schedules import summarize

RESULTS = Path(__file__).with_name("RESULTS.md")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.reliability.soak", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--schedules", type=int, default=1000, help="randomized schedules (default 1000)"
    )
    parser.add_argument("--first-seed", type=int, default=1, help="seed of the first schedule")
    parser.add_argument("--parallel", type=int, default=8, help="schedules at once (default 8)")
    parser.add_argument(
        "--fault-trials", type=int, default=300, help="webhook fault trials (default 300)"
    )
    parser.add_argument(
        "--storms", type=int, default=20, help="controller fault storms (default 20)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write the table")
    parser.add_argument("--no-write", action="store_true", help="print only")
    return parser.parse_args(argv)


def run_schedules(args: argparse.Namespace, violations: list[str]) -> None:
    namespaces = [f"soak-{i}" for i in range(args.parallel)]
    seeds = list(range(args.first_seed, args.first_seed + args.schedules))
    done: list[ScheduleResult] = []
    with Rig(namespaces) as rig, tempfile.TemporaryDirectory(prefix="elb-soak-") as tmp:
        rig.wait_until_ready()
        runner = Runner(rig, Path(tmp))
        try:
            batch = max(args.parallel * 5, 50)
            for start in range(0, len(seeds), batch):
                results = runner.run_many(seeds[start : start + batch], args.parallel)
                done += results
                runner.last_submitters.clear()
                for r in results:
                    for v in r.violations:
                        violations.append(f"schedule {r.seed}: {v}")
                        print(f"VIOLATION in schedule {r.seed}: {v}", flush=True)
                print(
                    f"schedules {len(done)}/{len(seeds)}: "
                    f"{sum(r.submitters for r in done)} submitters, "
                    f"{sum(r.searches_ran for r in done)} searches, {sum(r.crashes for r in done)} crashes, "
                    f"max active {max(r.max_active for r in done)}, "
                    f"max live holders {max(r.max_live_holders for r in done)}, "
                    f"violations {len(violations)}",
                    flush=True,
                )
        finally:
            runner.close()
        served = rig.admissions_served()
    totals = summarize(done, LEDGER)
    LEDGER.record(
        "1",
        replica_a_admissions=served[0],
        replica_b_admissions=served[1],
        reclaim_events_lost=runner.events_lost,
    )
    print("promise 1:", ", ".join(f"{k}={v}" for k, v in totals.items()), flush=True)


def run_faults(args: argparse.Namespace, violations: list[str]) -> None:
    with Rig([WEBHOOK_NS, CONTROLLER_NS], env=FAULTY_ENV, users=[User.plain("alice")]) as rig:
        rig.wait_until_ready()
        rng = random.Random(args.first_seed)
        results = []
        for i in range(args.fault_trials):
            results.append(webhook_trial(rig, WEBHOOK_NS, rng))
            if (i + 1) % 50 == 0:
                print(f"webhook fault trials {i + 1}/{args.fault_trials}", flush=True)
        for i in range(args.storms):
            results.append(controller_trial(rig, CONTROLLER_NS, rng))
            print(f"controller fault storms {i + 1}/{args.storms}", flush=True)
    for r in results:
        violations.extend(f"{r.kind}: {w}" for w in r.wrong)
    LEDGER.record(
        "2",
        runs=len(results),
        faults=sum(r.faults for r in results),
        violations=sum(len(r.wrong) for r in results),
        webhook_trials=args.fault_trials,
        controller_storms=args.storms,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.schedules < 1000:
        print(f"note: {args.schedules} schedules (the soak's promise is >= 1,000)", file=sys.stderr)
    started = time.monotonic()
    violations: list[str] = []
    run_schedules(args, violations)
    run_faults(args, violations)
    elapsed = time.monotonic() - started
    table = LEDGER.table()
    print("\n" + table)
    for v in violations:
        print("VIOLATION:", v)
    if not args.no_write:
        args.results.write_text(
            "# elb-gate reliability soak results\n\n"
            f"Written by `make soak` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC in {elapsed / 60:.1f} min: "
            f"{args.schedules} randomized schedules (seeds {args.first_seed}.."
            f"{args.first_seed + args.schedules - 1}, {args.parallel} at once), "
            f"{args.fault_trials} webhook fault trials, {args.storms} controller fault storms.\n\n"
            f"{table}\n\n"
            + (
                "Violations:\n\n" + "\n".join(f"- {v}" for v in violations)
                if violations
                else "Violations: none."
            )
            + "\n"
        )
        print(f"wrote {args.results}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
