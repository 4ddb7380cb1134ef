"""Randomized schedules: N submitters of mixed protocols racing in one namespace.

A schedule is drawn from its seed (how many submitters, which protocol, which
identity, delays, who crashes where, who misbehaves), run against the shared rig
in a namespace of its own, and judged by the :class:`~tests.reliability.observer.Observer`
plus three end checks: every submitter that did not crash got its search in, every
crashed holder's Lease was reclaimed (by the dead-holder path when it had a pod
stamp, by expiry otherwise), and no submitter failed with an error.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from queue import Queue

from elbgate.names import lease_name
from tests.reliability.cluster import CEILING, SKEW_SECONDS, TTL_SECONDS, Rig
from tests.reliability.job_completion import JobCompletion
from tests.reliability.observer import NamespaceRecord, Observer
from tests.reliability.submitters import CrashPoint, Protocol, SubmitPlan, Submitter

PROTOCOL_WEIGHTS: dict[Protocol, float] = {"client": 0.4, "raw": 0.35, "kubectl": 0.15, "cli": 0.1}
MAX_PER_PROTOCOL: dict[Protocol, int] = {"client": 12, "raw": 12, "kubectl": 2, "cli": 1}
"""kubectl and the CLI spawn a process per step and hold the Lease for seconds: capped
so a schedule fits the CI budget (each still appears in most schedules' mix)."""
CRASH_POINTS: tuple[CrashPoint, ...] = ("after_acquire", "mid_jobs", "after_jobs")
CRASH_PROBABILITY = 0.12
MAX_CRASHES = 2
"""A crash without a pod stamp stalls the namespace for a TTL: at most two per schedule."""
POD_IDENTITY_PROBABILITY = 0.3
SEARCH_SHAPES: tuple[tuple[str, ...], ...] = (
    ("submit", "finalizer"),  # cloud job submission: the submit Job, then the finalizer
    ("blast", "blast", "finalizer"),  # direct mode: batch Jobs, then the finalizer
)
SCHEDULE_SECONDS = 150.0
RECLAIM_SECONDS = 45.0


@dataclass(frozen=True)
class ScheduleSpec:
    """Everything random about one schedule, fixed by its seed."""

    seed: int
    plans: tuple[SubmitPlan, ...]

    @classmethod
    def from_seed(cls, seed: int) -> ScheduleSpec:
        rng = random.Random(seed)
        # 2..12, smaller sizes more often (mean ~5): every size occurs, CI stays in budget.
        n = round(rng.triangular(2, 12, 2))
        counts: Counter[Protocol] = Counter()
        plans = []
        crashes = 0
        for _ in range(n):
            choices = [p for p in PROTOCOL_WEIGHTS if counts[p] < MAX_PER_PROTOCOL[p]]
            protocol = rng.choices(choices, [PROTOCOL_WEIGHTS[p] for p in choices])[0]
            counts[protocol] += 1
            misbehaves = protocol in ("raw", "kubectl")
            crash: CrashPoint | None = None
            if crashes < MAX_CRASHES and rng.random() < CRASH_PROBABILITY:
                crash = rng.choice(CRASH_POINTS)
                crashes += 1
            plans.append(
                SubmitPlan(
                    protocol=protocol,
                    pod_identity=rng.random() < POD_IDENTITY_PROBABILITY,
                    start_delay=rng.uniform(0.0, 0.3),
                    apps=rng.choice(SEARCH_SHAPES),
                    crash=crash,
                    intrude=misbehaves and rng.random() < 0.25,
                    skip_census=misbehaves and rng.random() < 0.3,
                    step_delay=rng.uniform(0.0, 0.08),
                )
            )
        return cls(seed, tuple(plans))


@dataclass
class ScheduleResult:
    """What one schedule showed."""

    seed: int
    namespace: str
    submitters: int
    protocols: Counter[str]
    writes: int = 0
    max_active: int = 0
    max_live_holders: int = 0
    searches_ran: int = 0
    crashes: int = 0
    reclaimed: Counter[str] = field(default_factory=Counter)
    intrusions: int = 0
    intrusions_refused: int = 0
    denials: Counter[int] = field(default_factory=Counter)
    gate_a_checked: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)


class Runner:
    """Runs schedules on a rig, several at once, each in a namespace slot of its own."""

    def __init__(self, rig: Rig, workdir: Path) -> None:
        self.rig = rig
        self.workdir = workdir
        self.observer = Observer(rig.emu)
        self.completion = JobCompletion(rig.emu).start()
        self.events_lost = 0
        """Reclaims whose Event never arrived (found in the controller's log instead)."""
        self.last_submitters: dict[int, list[Submitter]] = {}
        """Each seed's submitters (their traces explain a failing schedule)."""
        self._slots: Queue[str] = Queue()
        for ns in rig.namespaces:
            self._slots.put(ns)

    def close(self) -> None:
        self.completion.stop()
        self.observer.close()

    @contextmanager
    def _slot(self) -> Iterator[str]:
        ns = self._slots.get(timeout=600)
        try:
            yield ns
        finally:
            self._slots.put(ns)

    def run_many(self, seeds: Iterable[int], parallel: int) -> list[ScheduleResult]:
        """Run every seed's schedule, ``parallel`` at a time (<= namespace slots)."""
        with ThreadPoolExecutor(max_workers=min(parallel, len(self.rig.namespaces))) as pool:
            return list(pool.map(self.run, seeds))

    def run(self, seed: int) -> ScheduleResult:
        """Run one schedule to its end and judge it."""
        with self._slot() as ns:
            return self._run_in(ns, seed)

    def _run_in(self, ns: str, seed: int) -> ScheduleResult:
        started = time.monotonic()
        self.rig.reset_namespace(ns)
        spec = ScheduleSpec.from_seed(seed)
        workdir = self.workdir / f"seed-{seed}"
        submitters = [
            Submitter(self.rig, ns, plan, f"s{seed}-{i}", workdir)
            for i, plan in enumerate(spec.plans)
        ]
        self.last_submitters[seed] = submitters
        result = ScheduleResult(seed, ns, len(submitters), Counter(p.protocol for p in spec.plans))
        record = self.observer.watch(
            ns,
            {s.username: s for s in submitters},
            ceiling=CEILING,
            skew_seconds=SKEW_SECONDS,
            default_ttl=TTL_SECONDS,
        )
        self.completion.add(ns, seed)
        try:
            deadline = time.monotonic() + SCHEDULE_SECONDS
            threads = [
                threading.Thread(target=s.run, args=(deadline,), name=s.tag, daemon=True)
                for s in submitters
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(max(1.0, deadline + 60 - time.monotonic()))
            hung = [t.name for t in threads if t.is_alive()]
            if hung:
                result.violations.append(f"submitters did not finish: {hung}")
            self._await_reclaims(record, submitters)
        finally:
            self.completion.remove(ns)
            self.observer.unwatch(ns)
        self._judge(result, record, submitters)
        result.seconds = time.monotonic() - started
        return result

    def _await_reclaims(self, record: NamespaceRecord, submitters: list[Submitter]) -> None:
        """Wait (bounded) until no crashed submitter is still the Lease's holder."""
        crashed = {s.username for s in submitters if s.crashed}
        deadline = time.monotonic() + RECLAIM_SECONDS
        while time.monotonic() < deadline:
            lease = self.rig.emu.find("leases", record.namespace, lease_name(record.namespace))
            user = ((lease or {}).get("metadata", {}).get("annotations") or {}).get(
                "elb-gate.io/holder-user"
            )
            held = bool((lease or {}).get("spec", {}).get("holderIdentity"))
            if not (held and user in crashed):
                return
            time.sleep(0.1)

    def _judge(
        self, result: ScheduleResult, record: NamespaceRecord, submitters: list[Submitter]
    ) -> None:
        result.writes = record.writes
        result.max_active = record.max_active
        result.max_live_holders = record.max_live_holders
        result.gate_a_checked = record.gate_a_checked
        result.violations.extend(record.violations)
        for s in submitters:
            result.intrusions += s.intrusions
            result.intrusions_refused += s.intrusions_refused
            result.denials.update(s.denials)
            if s.outcome == "error":
                result.violations.append(f"{s.tag} ({s.plan.protocol}) failed: {s.error}")
            elif s.outcome == "crashed":
                result.crashes += 1
                result.reclaimed[self._reclaim_path(record, s, result)] += 1
            elif s.outcome == "ran":
                result.searches_ran += 1
            else:
                result.violations.append(
                    f"{s.tag} ({s.plan.protocol}) never got its search in: {s.outcome}, "
                    f"created {sorted(s.created)}"
                )
            if s.outcome == "ran":
                missing = [
                    n for n in s.job_names if self.rig.emu.find("jobs", result.namespace, n) is None
                ]
                if missing:
                    result.violations.append(
                        f"{s.tag}: reported its search in, but {missing} are missing"
                    )

    def _controller_reclaim(self, namespace: str, holder: str) -> str:
        """Why the controller reclaimed ``holder`` (``dead_holder``/``expired``), from its
        Event — or, when the Event was lost (the controller logs and goes on), from its
        "submit Lease reclaimed" log line; ``none`` when it did not."""
        if self._wait_for_event(namespace, "LeaseHolderGoneReclaimed", holder):
            return "dead_holder"
        for ctl in self.rig.controllers:
            for line in ctl.logs("submit Lease reclaimed"):
                if line.get("holder") == holder and line.get("namespace") == namespace:
                    self.events_lost += 1
                    return str(line.get("reason"))
        return "none"

    def _wait_for_event(self, namespace: str, reason: str, text: str) -> bool:
        """Whether an Event ``reason`` naming ``text`` is (or soon is) in ``namespace``:
        the controller records it just after the write it describes."""
        deadline = time.monotonic() + 10
        while True:
            events = self.rig.emu.list("events", namespace)
            if any(e.get("reason") == reason and text in str(e.get("message")) for e in events):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def _reclaim_path(self, record: NamespaceRecord, s: Submitter, result: ScheduleResult) -> str:
        """How a crashed submitter's hold ended: ``dead_holder``, ``expired`` (controller
        or a takeover after expiry), ``never_held`` — or a violation."""
        holds = record.holds_by_user.get(s.username, set())
        if not holds:
            return "never_held"
        crashed_at = s.crashed_at or datetime.min.replace(tzinfo=UTC)
        freed = [f for f in record.freed if f[1] == s.username and f[4] >= crashed_at]
        if not freed:
            lease = self.rig.emu.find("leases", record.namespace, lease_name(record.namespace))
            logs = [
                {k: v for k, v in line.items() if k not in ("ts", "logger")}
                for ctl in self.rig.controllers
                for line in ctl.logs()[-400:]
                if line.get("namespace") == record.namespace and line.get("level") != "DEBUG"
            ][-8:]
            result.violations.append(
                f"{s.tag} ({s.plan.protocol}, pod {s.plan.pod_identity}): crashed holder "
                f"{sorted(holds)} not reclaimed within {RECLAIM_SECONDS:g}s of its crash at "
                f"{crashed_at:%H:%M:%S}; Lease now {(lease or {}).get('spec')} "
                f"{((lease or {}).get('metadata') or {}).get('annotations')}; controller: {logs}"
            )
            return "not_reclaimed"
        holder, _, how, was_live, _ = freed[-1]
        if s.plan.pod_identity:
            reason = self._controller_reclaim(record.namespace, holder)
            if reason != "dead_holder":
                seen = [
                    (e.get("reason"), str(e.get("message"))[:100])
                    for e in self.rig.emu.list("events", record.namespace)
                ]
                result.violations.append(
                    f"{s.tag}: pod-stamped crashed holder {holder} freed by {how} "
                    f"(live: {was_live}, controller: {reason}), not by the dead-holder path; "
                    f"events: {seen}"
                )
            return "dead_holder"
        if was_live:
            result.violations.append(f"{s.tag}: crashed holder {holder} freed while live ({how})")
        return "expired_takeover" if how == "takeover" else "expired"
