"""``make soak``: the long reliability runs on the real control plane, with their figures.

    python -m testbed.reliability.soak            # 1,000 schedules and race histories, faults
    python -m testbed.reliability.soak --schedules 0 --fault-trials 0 --storms 0  # races only
    python -m testbed.reliability.soak --schedules 2000 --parallel 24 --fault-trials 400

Starts a control plane (or attaches to ``ELB_GATE_CONTROL_PLANE``), runs promise 1's
randomized schedules on one rig, then the race histories (checked for
linearizability by ``lincheck/``, porcupine), then promise 2's fault trials, each on a
rig behind a fault proxy. It prints the counts as it goes and rewrites
``tests/reliability/RESULTS.md`` after every batch (an interrupted soak leaves its
figures, marked partial), and exits 1 on any violation or any disagreement between the
oracle and the census (each one is printed).

A run the harness itself could not finish (a wait that timed out, an API call that
failed) is not a verdict on the gates: it is printed, listed in RESULTS.md under
"Runs the harness could not finish", and the soak goes on with the next one; the exit
status is then 2 (when nothing worse was found), so it is never passed over.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Mapping
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testbed.controlplane import REPO, ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.reliability.faults import (
    FAULTY_ENV,
    Holder,
    TrialResult,
    controller_trial,
    record,
    webhook_trial,
)
from testbed.reliability.histories import History, Verdict, check
from testbed.reliability.ledger import Ledger, markdown_table
from testbed.reliability.races import KINDS, races_on, run_all
from testbed.reliability.rig import CEILING, CONTROLLER_ENV, Rig
from testbed.reliability.scheduler import Runner, ScheduleResult
from testbed.reliability.summary import reclaim_timing, summarize, tally

RESULTS = REPO / "tests" / "reliability" / "RESULTS.md"
HISTORY_SLOTS = 6
"""Race histories at once."""
PARALLEL = min(16, os.cpu_count() or 1)
"""Schedules at once by default: one per core, at most 16. A schedule mostly waits on
Jobs and Lease expiries, but the rig's webhooks and controllers share the machine with
them: 16 at once on two cores starve the controllers until none takes the leader Lease."""

ORACLE_VS_CENSUS = """\
## How the oracle differs from the census

The observer counts active searches twice after every Job write, on the same Jobs at
the same instant: with `elbgate.census` (the code the webhook, the controller and the
CLI share) and with `testbed/reliability/oracle.py`, written separately from the
documented definition (docs/design.md, "Census") and the Job controller's status
facts. The oracle imports nothing from `elbgate`, `webhook` or `controller` (a test
parses its imports). In code they differ in that the oracle:

* reads labels, status and times from the raw Job dicts itself (no `JobRef`, no
  `elbgate.lease.parse_microtime`, no `elbgate.job_status`), and parses
  `creationTimestamp` with `datetime.fromisoformat`;
* decides "finished" in one function of its own (final condition or `completionTime`;
  pods terminating; a decided outcome; succeeded against completions / work queue);
* keys a search by `elb-job-id`, else `<app>/<name>`, and drops a setup Job without an
  id, in one function (`search_key`), where the census splits Jobs into companions and
  finalizers before keying;
* computes only the active set: no orphans, finishing finalizers, staging or databases.

Beside it, the crude bound counts the distinct search keys of search Jobs that carry no
`True` `Complete`/`Failed` condition, finalizers whatever their age. It is never below
the oracle (checked after every write) and shows what the two finer counts discount.
"""
FIGURES = """job_events_checked max_active_oracle max_active_crude census_disagreements
gate_a_creates_checked lease_writes_checked takeovers stalls stalls_refused_on_waking
stalls_admitted_by_a_siblings_hold max_live_holders searches_ran intrusions
intrusions_refused intrusions_admitted_by_a_siblings_hold""".split()
"""The schedules' totals RESULTS.md shows, in this order."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.reliability.soak",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--schedules", type=int, default=1000, help="schedules")
    parser.add_argument("--first-seed", type=int, default=1, help="seed of the first schedule")
    parser.add_argument(
        "--parallel",
        type=int,
        default=PARALLEL,
        help="schedules at once, each in a namespace of its own (one per core, at most 16)",
    )
    parser.add_argument("--fault-trials", type=int, default=300, help="webhook fault trials")
    parser.add_argument("--storms", type=int, default=20, help="controller fault storms")
    parser.add_argument("--histories", type=int, default=1000, help="race histories to check")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write them")
    return parser.parse_args(argv)


class Soak:
    """The run's state, written out after every batch."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.done: list[ScheduleResult] = []
        self.trials: list[TrialResult] = []
        self.violations: list[str] = []
        self.disagreements: list[str] = []
        self.served: list[int] = []
        self.ledger = Ledger()
        """What RESULTS.md last recorded (this run's own, not the test session's LEDGER)."""
        self.census_reads: Counter[str] = Counter()
        """How the webhooks of the race histories read Gate B's census (their /metrics)."""
        self.control_plane = ""
        self.histories: list[History] = []
        self.verdicts: list[Verdict] = []
        self.unfinished: list[tuple[str, str]] = []
        """(what, why) for each run the harness could not finish."""
        self.commit = _commit()

    def harness_error(self, what: str, exc: Exception) -> None:
        """Record a run the harness could not finish, and go on."""
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [
            f
            for f in frames
            if Path(f.filename).is_relative_to(REPO) and Path(f.filename).name != "waiting.py"
        ]
        where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
        first = (str(exc).strip().splitlines() or [""])[0]
        why = f"{type(exc).__name__} at {where}: {first}"[:300]
        self.unfinished.append((what, why))
        print(f"UNFINISHED {what}: {why}", flush=True)

    def say(self, text: str) -> None:
        """Print a line of progress, with the minutes the soak has run."""
        print(f"{text} ({(time.monotonic() - self.started) / 60:.1f} min)", flush=True)

    def violation(self, where: str, what: str) -> None:
        self.violations.append(f"{where}: {what}")
        print(f"VIOLATION in {where}: {what}", flush=True)

    def unfinished_count(self, prefix: str) -> int:
        return sum(what.startswith(prefix) for what, _ in self.unfinished)

    def run_histories(self, cp: ControlPlane) -> None:
        """Race histories, recorded and checked in batches of a few dozen."""
        args = self.args
        if args.histories <= 0:
            return
        slots = [cp.new_namespace("soak-lin") for _ in range(HISTORY_SLOTS)]
        with races_on(cp, slots) as races:
            seeds = list(range(args.first_seed, args.first_seed + args.histories))
            step = 8 * len(KINDS)
            for start in range(0, len(seeds), step):
                batch = run_all(
                    races,
                    seeds[start : start + step],
                    slots,
                    on_error=lambda p, exc: self.harness_error(f"history {p.kind}-{p.seed}", exc),
                )
                found = check(batch)
                self.histories += batch
                self.verdicts += found
                self.census_reads = races.rig.census_reads()
                for v in found:
                    if v.result != "Ok":
                        self.violation(f"history {v.name}", f"{v.result}: {'; '.join(v.why)}")
                self.say(
                    f"histories {len(self.histories)}/{args.histories}: "
                    f"{sum(v.result == 'Illegal' for v in self.verdicts)} not linearizable, "
                    f"{sum(v.result == 'Unknown' for v in self.verdicts)} undecided"
                )
                self.write()

    def run_schedules(self, cp: ControlPlane) -> None:
        args = self.args
        if args.schedules <= 0:
            return
        slots = [cp.new_namespace("soak") for _ in range(args.parallel)]
        seeds = list(range(args.first_seed, args.first_seed + args.schedules))
        with (
            Rig(cp, slots, controller_env=CONTROLLER_ENV) as rig,
            tempfile.TemporaryDirectory(prefix="elb-soak-") as tmp,
        ):
            rig.wait_until_ready()
            with closing(Runner(rig, Path(tmp), report=True)) as runner:
                results = runner.run_each(
                    seeds,
                    args.parallel,
                    on_error=lambda seed, exc: self.harness_error(f"schedule {seed}", exc),
                )
                for i, result in enumerate(results, 1):
                    self._take(result, quiet=i % 10 != 0 and i != len(seeds))
                    if i % 25 == 0 or i == len(seeds):
                        self.served = rig.admissions_served()
                        self.write()

    def _take(self, r: ScheduleResult, quiet: bool) -> None:
        self.done.append(r)
        self.disagreements += [f"schedule {r.seed}: {d}" for d in r.disagreement_texts]
        for v in r.violations:
            self.violation(f"schedule {r.seed}", v)
        if quiet:
            return
        done = self.done
        t = summarize(done, Ledger())  # RESULTS.md's totals, recorded when it is written
        self.say(
            f"schedules {len(done)}/{self.args.schedules}: {t['submitters']} submitters, "
            f"{t['job_events_checked']} Job writes checked, {t['searches_ran']} searches, "
            f"{t['deaths']} deaths, max active {t['max_active_oracle']}, "
            f"disagreements {t['census_disagreements']}, violations {len(self.violations)}, "
            f"schedule mean {sum(r.seconds for r in done) / len(done):.0f} s"
        )

    def run_faults(self, cp: ControlPlane) -> None:
        args = self.args
        if args.fault_trials <= 0 and args.storms <= 0:
            return
        hook_ns, ctl_ns = cp.new_namespace("soak-faults-hook"), cp.new_namespace("soak-faults-ctl")
        with (
            FaultProxy(cp) as proxy,
            Rig(cp, [hook_ns, ctl_ns], replicas=1, env=FAULTY_ENV, proxy=proxy) as rig,
        ):
            rig.wait_until_ready()
            rng = random.Random(args.first_seed)
            alice = Holder(cp, hook_ns, cp.token("alice"))
            try:
                for i in range(args.fault_trials):
                    try:
                        self.trials.append(webhook_trial(rig, proxy, alice, hook_ns, rng))
                    except Exception as exc:
                        self.harness_error(f"webhook fault trial {i + 1}", exc)
                    if (i + 1) % 50 == 0:
                        self.say(f"webhook fault trials {i + 1}/{args.fault_trials}")
            finally:
                alice.stop()
            for i in range(args.storms):
                try:
                    self.trials.append(controller_trial(rig, proxy, ctl_ns, rng))
                except Exception as exc:
                    self.harness_error(f"controller fault storm {i + 1}", exc)
                self.say(f"controller fault storms {i + 1}/{args.storms}")
        for r in self.trials:
            self.violations.extend(f"{r.kind}: {w}" for w in r.wrong)

    # -- RESULTS.md --------------------------------------------------------------------------

    def write(self) -> None:
        self.args.results.write_text(self.render())  # fills the ledger, printed at the end

    def render(self) -> str:
        self.ledger = ledger = Ledger()
        totals = summarize(self.done, ledger, self.served) if self.done else {}
        if self.trials:
            record(self.trials, ledger)
        minutes = (time.monotonic() - self.started) / 60
        left_schedules = self.unfinished_count("schedule ")
        left_histories = self.unfinished_count("history ")
        ran = len(self.done) + left_schedules
        seeds = f"seeds {self.args.first_seed}..{self.args.first_seed + ran - 1}"
        if self.args.schedules <= 0:
            state, seeds = "No randomized schedules in this run", "`--schedules 0`"
        elif ran < self.args.schedules:
            state = f"**Partial**: {len(self.done)} of {self.args.schedules} schedules so far"
        else:
            state = f"{len(self.done)} randomized schedules"
        if left_schedules:
            state += f" (and {left_schedules} the harness could not finish)"
        if self.args.histories > 0 and len(self.histories) + left_histories < self.args.histories:
            state += f"; **partial**: {len(self.histories)} of {self.args.histories} race histories"
        if left_histories:
            state += f"; {left_histories} race histories the harness could not finish"
        lines = [
            "# elb-gate reliability soak results",
            "",
            f"Written by `make soak` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC after "
            f"{minutes:.1f} min on the real control plane ({self.control_plane}). {state} "
            f"({seeds}, {self.args.parallel} at once; race histories "
            f"{HISTORY_SLOTS} at once; ceiling {CEILING})"
            + (
                f", {sum(r.kind.startswith('webhook') for r in self.trials)} webhook fault "
                f"trials, {sum(r.kind.startswith('controller') for r in self.trials)} "
                "controller fault storms."
                if self.trials
                else "; fault trials not run yet."
            ),
            "",
            f"Commit: `{self.commit}`.",
            "",
        ]
        if ledger.rows:
            lines += [ledger.table(), ""]
        lines += self._linearizability()
        if self.done or left_schedules:
            lines += self._schedule_figures(totals)
        else:
            # Figures of a part that did not run would read as outcomes (a zero
            # "searches ran", a "max active" of 0): say it did not run instead.
            lines += [
                "## Randomized schedules",
                "",
                "Not run (`--schedules 0`): the oracle's figures, the failure modes and the "
                "comparison of the oracle with the census come from them.",
            ]
        lines += ["", "## Violations", ""]
        lines += [f"- {v}" for v in self.violations] or ["None."]
        lines += ["", "## Runs the harness could not finish", ""]
        if self.unfinished:
            lines += [
                "Not verdicts on the gates: the harness stopped waiting (or an API call of its "
                "own failed), so the run was left out of every figure above. Each one needs a "
                "look: a wait that timed out may hide a gate that never let a client in.",
                "",
            ]
        lines += [f"- {what}: {why}" for what, why in self.unfinished] or ["None."]
        return "\n".join(lines) + "\n"

    def _schedule_figures(self, totals: Mapping[str, Any]) -> list[str]:
        """What the randomized schedules observed: the oracle's figures, the failure
        modes, and where the oracle and the census disagreed."""
        figures = [(key.replace("_", " "), totals.get(key, 0)) for key in FIGURES]
        lines = ["## The oracle's figures", "", *markdown_table("figure | value", "lr", figures)]
        lines += ["", "## Failure modes", "", *self._failure_modes(), "", ORACLE_VS_CENSUS]
        lines += ["## Disagreements between the oracle and the census", ""]
        lines += [f"- {d}" for d in self.disagreements] or ["None."]
        return lines

    def _linearizability(self) -> list[str]:
        """The race histories: per kind, what the API server recorded, and the verdicts."""
        if not self.histories:
            return []
        verdicts = {v.name: v.result for v in self.verdicts}
        per_kind = []
        for kind in KINDS:
            mine = [h for h in self.histories if h.kind == kind]
            c = sum((Counter(h.counts()) for h in mine), Counter[str]())
            results = Counter(verdicts.get(h.name, "unchecked") for h in mine)
            row = [len(mine), sum(h.split for h in mine)]
            row += [c[k] for k in ("creates", "admitted", "refused", "finishes")]
            row += [c["deletes"], c["lease_writes"], results["Ok"], results["Illegal"]]
            per_kind.append((kind.replace("_", " "), *row, results["Unknown"]))
        out = [
            "## Linearizability of admission",
            "",
            f"{len(self.histories)} race histories recorded on the real control plane and "
            "checked by `lincheck/` (porcupine) against the sequential model of the gates "
            "written from docs/design.md. Every figure is what the API server's audit log "
            "and the Job watch recorded, not what a schedule intended.",
            "",
            *markdown_table(
                "kind | histories | races split across the replicas | creates | admitted "
                "| refused | Job finishes | Job deletes | Lease writes | linearizable "
                "| not linearizable | undecided",
                "l" + "r" * 11,
                per_kind,
            ),
        ]
        hit = Counter(h.fault for h in self.histories if h.fault_fired)
        fired = Counter[str]()
        for h in self.histories:
            fired[h.fault] += h.fault_fired
        faults = [(k.replace("_", " "), hit[k], fired[k]) for k in sorted(fired) if k != "none"]
        head = "fault on the webhooks' API calls | histories it hit | requests it hit"
        out += ["", *markdown_table(head, "lrr", faults)]
        if self.census_reads:
            head = 'census read by the webhooks (docs/design.md, "The census read at a fence")'
            out += ["", *markdown_table(f"{head} | reads", "lr", sorted(self.census_reads.items()))]
        jobs = sum((h.outcomes for h in self.histories), Counter[str]())
        seen = [(*key.split(":", 1), n) for key, n in sorted(jobs.items())]
        out += ["", *markdown_table("Job | last seen | count", "llr", seen)]
        return [*out, ""]

    def _failure_modes(self) -> list[str]:
        deaths, ended = tally(self.done, "deaths"), tally(self.done, "reclaimed")
        stalls, timing = tally(self.done, "stalls"), reclaim_timing(self.done)
        died = []
        for death in sorted(deaths):
            how = ", ".join(
                f"{k.split(':', 1)[1]} {v}"
                for k, v in sorted(ended.items())
                if k.startswith(f"{death}:")
            )
            died.append((death, deaths[death], how, timing.get(death, "-")))
        head = "submitter died by | count | how its hold ended | seconds from death to release"
        stalled = []
        for key, n in sorted(stalls.items()):
            kind, how = key.split(":", 1)
            stalled.append((kind.replace("_", " "), how, n))
        died_table = markdown_table(f"{head} (median / max)", "lrlr", died)
        stalled_table = markdown_table("a holder stalled, its hold | ended | count", "llr", stalled)
        return [*died_table, "", *stalled_table]


def _commit() -> str:
    """The commit the soak runs (with ``+changes`` when the work tree differs from it)."""
    describe = ["git", "describe", "--always", "--abbrev=12", "--exclude=*", "--dirty= +changes"]
    try:
        done = subprocess.run(describe, cwd=REPO, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.schedules < 1000:
        print(f"note: {args.schedules} schedules (the soak's promise is >= 1,000)", file=sys.stderr)
    soak = Soak(args)
    cp = ControlPlane.for_session()
    soak.control_plane = f"Kubernetes {cp.kubernetes_version}"
    try:
        soak.run_schedules(cp)
        soak.run_histories(cp)
        soak.run_faults(cp)
    finally:
        cp.stop()
        soak.write()
    print("\n" + soak.ledger.table())
    for v in soak.violations:
        print("VIOLATION:", v)
    print(f"wrote {args.results}")
    for what, why in soak.unfinished:
        print("UNFINISHED:", what, why)
    if soak.violations or soak.disagreements:
        return 1
    return 2 if soak.unfinished else 0


if __name__ == "__main__":
    sys.exit(main())
