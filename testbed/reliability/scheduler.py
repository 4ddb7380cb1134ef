"""Run randomized schedules on the rig and judge each one.

A schedule (:mod:`testbed.reliability.schedules`) runs in a namespace slot of its own,
several at once. While it runs, the :class:`~testbed.reliability.observer.Observer`
checks the ceiling and compares the oracle with the census after every Job write. When
its submitters are done (and every dead holder's Lease has been freed, or a bound has
passed), it is judged from the audit log (:mod:`testbed.reliability.gate_a`):

* every Job CREATE Gate A applied to was made by the holder in force at its revision;
* every Lease write kept the guard's rules, and its stamp named the authenticated user
  (and, for an in-cluster submitter, its Pod);
* every dead holder's hold ended the way its death allows: a provable death
  (``pod_deleted``, ``pod_failed``, ``container_restarted``, ``node_not_ready``) by the
  controller's dead-holder reclaim before the Lease expired; a death the cluster cannot
  see (``thread_died``, ``process_died``) only at expiry (the controller's, or a
  takeover's); and the controller never cleared a holder in force that had not died;
* a stalled hold ended only at expiry: taken over by the waiting dashboard, or (left
  alone) cleared by the controller; and the stalled holder's first Job CREATE after it
  woke was refused;
* every submitter that did not die got its search in, and none failed with an error.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, SimpleQueue

from testbed.clients import is_expired, lease_name
from testbed.controller_process import CONTROLLER_USER
from testbed.holders import own_node
from testbed.reliability.audit import AuditTail, Seen
from testbed.reliability.gate_a import (
    HOLDER_USER_ANNOTATION,
    LeaseState,
    Terms,
    Write,
    judge_gated_create,
    judge_lease,
    lease_timeline,
    state_before,
)
from testbed.reliability.observer import NamespaceRecord, Observer
from testbed.reliability.rig import (
    CONTROLLER_SKEW_SECONDS,
    SKEW_SECONDS,
    TTL_SECONDS,
    Rig,
    each_on_a_slot,
)
from testbed.reliability.schedules import draw
from testbed.reliability.submitters import POD_DEATHS, StallBoard, Submitter
from testbed.waiting import wait_until

SCHEDULE_SECONDS = 300.0
RECLAIM_SECONDS = 60.0
"""How long a schedule waits, after its submitters are done, for dead holders' Leases to
be freed (provable deaths take seconds; a 6 s TTL expires within 7)..."""
RECLAIM_GRACE_SECONDS = 30.0
"""... or this long past a dead hold's expiry on the controller's margin, if later."""
AUDIT_SECONDS = 30.0
HOLDER_POD_ANNOTATION = "elb-gate.io/holder-pod"
TERMS = Terms(
    skew_seconds=SKEW_SECONDS, default_duration=TTL_SECONDS, controller_user=CONTROLLER_USER
)


@dataclass
class ScheduleResult:
    """What one schedule showed."""

    seed: int
    namespace: str
    submitters: int
    protocols: Counter[str]
    job_events: int = 0
    lease_writes: int = 0
    max_active: int = 0
    max_crude: int = 0
    max_live_holders: int = 0
    disagreements: int = 0
    disagreement_texts: list[str] = field(default_factory=list)
    searches_ran: int = 0
    crashes: int = 0
    deaths: Counter[str] = field(default_factory=Counter)
    reclaimed: Counter[str] = field(default_factory=Counter)
    """``<death>:<how the hold ended>`` for every dead submitter."""
    reclaim_seconds: list[tuple[str, float]] = field(default_factory=list)
    """(death, seconds from the death to the write that freed its hold)."""
    intrusions: int = 0
    intrusions_refused: int = 0
    intrusions_by_sibling: int = 0
    """Intrusions admitted because another submitter with the same user held the Lease
    (Gate A's holder is a user: replicas sharing a ServiceAccount are one)."""
    denials: Counter[int] = field(default_factory=Counter)
    gate_a_checked: int = 0
    takeovers: int = 0
    stalls: Counter[str] = field(default_factory=Counter)
    """``<stall>:<how the hold ended>`` for each stalled hold (``taken_over:expired_takeover``,
    ``left_alone:expired``, ...)."""
    stalls_refused: int = 0
    """Stalled holders whose first Job CREATE after waking was refused."""
    stalls_admitted_by_sibling: int = 0
    """... or admitted while another submitter with the same user held the Lease."""
    job_fates: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)


class UserPool:
    """Plain users for the submitters: a schedule's users go back to the pool when it has
    been judged, so a soak of any length fits the control plane's token file, and no two
    schedules running at once share a user."""

    def __init__(self, fresh: Callable[[], str]) -> None:
        self._fresh = fresh
        self._free: SimpleQueue[str] = SimpleQueue()

    def take(self) -> str:
        try:
            return self._free.get_nowait()
        except Empty:
            return self._fresh()

    def give_back(self, names: Iterable[str]) -> None:
        for name in names:
            self._free.put(name)


class Runner:
    """Runs schedules on a rig, several at once, each in a namespace slot of its own."""

    def __init__(self, rig: Rig, workdir: Path, *, report: bool = False) -> None:
        margin = rig.controller_env.get("BLAST_LEASE_CLOCK_SKEW_SECONDS")
        if margin != str(CONTROLLER_SKEW_SECONDS):
            raise ValueError(
                f"the rig's controller must read expiry with a {CONTROLLER_SKEW_SECONDS} s "
                f"margin (rig.CONTROLLER_ENV), not {margin!r}: the stalls are timed by it"
            )
        self.rig = rig
        self.workdir = workdir
        self.audit = AuditTail(rig.cp.audit_log, rig.namespaces)
        self.audit.skip_to_end()
        printer = (lambda text: print(text, flush=True)) if report else None
        self.observer = Observer(rig.cp.admin, rig.namespaces, report=printer).start()
        self.users = UserPool(rig.cp.plain_user)

    def close(self) -> None:
        self.observer.stop()

    def run_each(
        self,
        seeds: Iterable[int],
        parallel: int,
        on_error: Callable[[int, Exception], None] | None = None,
    ) -> Iterator[ScheduleResult]:
        """Run every seed's schedule, ``parallel`` at a time (<= namespace slots), and
        yield each result as its schedule ends (:func:`~testbed.reliability.rig.each_on_a_slot`:
        a schedule the harness could not finish goes to ``on_error``, or is raised)."""
        return each_on_a_slot(seeds, self.rig.namespaces[:parallel], self.run, on_error)

    def run(self, seed: int, ns: str) -> ScheduleResult:
        """Run one schedule to its end in the namespace ``ns`` and judge it (a submitter
        that dies by ``node_not_ready`` runs on a Node of its own, deleted at the end)."""
        with ExitStack() as nodes:
            return self._run(seed, ns, lambda: nodes.enter_context(own_node(self.rig.cp)))

    def _run(self, seed: int, ns: str, node: Callable[[], str]) -> ScheduleResult:
        started = time.monotonic()
        self.rig.reset_namespace(ns)
        plans = draw(seed)
        workdir = self.workdir / f"seed-{seed}"
        board = StallBoard(others=sum(p.stall is None for p in plans))
        submitters = [
            Submitter(self.rig.cp, ns, plan, f"s{seed}-{i}", workdir, node, board, self.users.take)
            for i, plan in enumerate(plans)
        ]
        result = ScheduleResult(seed, ns, len(submitters), Counter(p.protocol for p in plans))
        result.job_fates.update(f"{j.app}:{j.fate}" for plan in plans for j in plan.jobs)
        start_rv = self.observer.current_rv(ns)
        record = self.observer.watch(ns)
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
            self._await_reclaims(ns, submitters)
            end_rv = self.observer.sync()
        finally:
            self.observer.unwatch(ns)
        self._judge(result, record, submitters, start_rv, end_rv)
        self.users.give_back(s.username for s in submitters if s.pod is None)
        result.seconds = time.monotonic() - started
        return result

    def _await_reclaims(self, ns: str, submitters: list[Submitter]) -> None:
        """Wait (bounded) until no dead submitter is still the Lease's holder: at most
        :data:`RECLAIM_SECONDS`, or past the dead hold's own expiry on the controller's
        margin if that is later (the dashboard's client keeps the duration the Lease
        had, so its hold may last an in-cluster holder's 120 s)."""
        dead = {s.username for s in submitters if s.crashed}
        if not dead:
            return
        name = lease_name(ns)
        bound = time.monotonic() + RECLAIM_SECONDS
        margin = CONTROLLER_SKEW_SECONDS + RECLAIM_GRACE_SECONDS

        def freed() -> bool:
            lease = self.rig.cp.admin.find("leases", ns, name) or {}
            spec = lease.get("spec") or {}
            notes = (lease.get("metadata") or {}).get("annotations") or {}
            if not (spec.get("holderIdentity") and notes.get(HOLDER_USER_ANNOTATION) in dead):
                return True
            past = is_expired(spec, datetime.now(UTC), margin, TTL_SECONDS)
            return past and time.monotonic() >= bound

        wait_until(freed, 3600, "dead holders' Leases freed, or their bound", interval=0.1)
        # a hold that never ended is judged below as a violation

    # -- judging -----------------------------------------------------------------------------

    def _judge(
        self,
        result: ScheduleResult,
        record: NamespaceRecord,
        submitters: list[Submitter],
        start_rv: int,
        end_rv: int,
    ) -> None:
        ns = record.namespace
        result.job_events = record.job_events
        result.max_active = record.max_active
        result.max_crude = record.max_crude
        result.disagreements = record.disagreement_count
        result.disagreement_texts = list(record.disagreements)
        result.violations.extend(record.violations)
        result.violations.extend(
            f"census disagrees with the oracle: {d}" for d in record.disagreements
        )

        added = [a for a in record.added if start_rv < a.rv <= end_rv]
        seen = [s for s in record.leases if start_rv < s.rv <= end_rv]
        seen += [Seen(a.rv, "jobs", a.name, None, a.obj) for a in added]
        deleted = {u: rv for u, rv in record.lease_deletes.items() if start_rv < rv <= end_rv}

        def complete() -> bool:
            self.audit.poll()
            _, rvs, deletes = self.audit.account(ns, seen, deleted)
            return not rvs and not deletes

        with suppress(AssertionError):  # what it still lacks is a violation, below
            wait_until(
                complete,
                AUDIT_SECONDS,
                "the audit log to hold every write the watches saw",
                interval=0.2,
            )
        writes, rvs, deletes = self.audit.account(ns, seen, deleted)
        if rvs or deletes:
            result.violations.append(
                f"the audit log lacks the writes at rv {sorted(rvs)} and the deletes at rv "
                f"{sorted(deletes)}"
            )
        timeline = lease_timeline(writes, ns)
        first = state_before(timeline, start_rv + 1)
        window = [s for s in timeline if start_rv < s.write.rv <= end_rv]
        judged = ([first] if first is not None else []) + window
        result.lease_writes = len(window)
        lease = judge_lease(judged, TERMS)
        result.takeovers = lease.takeovers
        result.max_live_holders = 2 if lease.live_takeovers else (1 if window else 0)
        result.violations.extend(lease.violations)

        by_rv = {w.rv: w for w in writes}
        verdicts: dict[str, str | None] = {}
        for a in added:
            gated = (
                a.app == "finalizer" or (a.app == "setup" and a.key is None) or not a.active_before
            )
            if not gated:
                continue
            create = by_rv.get(a.rv)
            if create is None or create.verb != "create":
                continue  # reported as missing from the audit log above
            result.gate_a_checked += 1
            wrong = judge_gated_create(create, timeline, TERMS)
            verdicts[a.name] = wrong
            if wrong is not None:
                result.violations.append(f"Gate A: {wrong}")

        owners = {holder: s for s in submitters for holder in s.holders}
        self._judge_stamps(result, window, owners)
        self._judge_reclaims(result, window, lease.cleared_live_by_controller, owners, submitters)
        # each Job name's first committed create (reversed: the earliest one is kept)
        creates = {
            w.name: w for w in reversed(writes) if (w.resource, w.verb) == ("jobs", "create")
        }
        self._judge_stalls(result, window, timeline, creates, submitters)
        self._judge_outcomes(result, submitters)
        for s in submitters:
            for name in s.intrusions_admitted:
                if name in verdicts and verdicts[name] is None:
                    result.intrusions_by_sibling += 1

    def _judge_stamps(
        self, result: ScheduleResult, window: list[LeaseState], owners: dict[str, Submitter]
    ) -> None:
        for state in window:
            owner = owners.get(state.holder)
            if owner is None or owner.pod is None:
                continue
            pod = owner.pod
            notes = (state.write.obj.get("metadata") or {}).get("annotations") or {}
            if notes.get(HOLDER_POD_ANNOTATION) != pod.stamp:
                result.violations.append(
                    f"Lease rv {state.write.rv}: holder {state.holder} of {owner.tag} "
                    f"stamped holder-pod {notes.get(HOLDER_POD_ANNOTATION)!r}, not {pod.stamp}"
                )

    def _judge_reclaims(
        self,
        result: ScheduleResult,
        window: list[LeaseState],
        cleared_live: list[LeaseState],
        owners: dict[str, Submitter],
        submitters: list[Submitter],
    ) -> None:
        for cleared in cleared_live:
            owner = owners.get(cleared.holder)
            if owner is None or not owner.crashed or owner.plan.death not in POD_DEATHS:
                result.violations.append(
                    f"the controller cleared {cleared.holder} (user {cleared.holder_user}, "
                    f"{owner.tag if owner else 'no submitter of this schedule'}) while it was in "
                    f"force, and its holder had not died provably"
                )
        for s in submitters:
            if not s.crashed:
                continue
            death = str(s.plan.death)
            result.crashes += 1
            result.deaths[death] += 1
            # how its last hold ended, and how long after its death
            held = [i for i, state in enumerate(window) if state.holder in s.holders]
            how, seconds = self._ended(window, held[-1], s) if held else ("never_held", None)
            result.reclaimed[f"{death}:{how}"] += 1
            if how == "not_reclaimed":
                result.violations.append(self._controller_said(result.namespace))
            if seconds is not None:
                result.reclaim_seconds.append((death, seconds))
            expected = (
                {"dead_holder"} if s.plan.death in POD_DEATHS else {"expired", "expired_takeover"}
            )
            if how not in expected | {"never_held"}:
                history = [
                    (st.write.rv, st.write.user, st.holder, f"{st.write.received:%H:%M:%S.%f}")
                    for st in window
                ]
                result.violations.append(
                    f"{s.tag} ({s.plan.protocol}, holders {sorted(s.holders)}, died {death} at "
                    f"{s.died_at:%H:%M:%S.%f}): its hold ended {how}, expected "
                    f"{' or '.join(sorted(expected))}; Lease history {history}"
                )

    def _controller_said(self, namespace: str) -> str:
        """The controllers' last log records about ``namespace`` (why no reclaim?)."""
        lines = [
            json.dumps(r, sort_keys=True)
            for ctl in self.rig.controllers
            for r in ctl.logs()
            if namespace in json.dumps(r)
        ]
        alive = [(c.name, c.alive) for c in self.rig.controllers]
        return f"controllers {alive} logged about {namespace}: {lines[-12:]}"

    def _judge_stalls(
        self,
        result: ScheduleResult,
        window: list[LeaseState],
        timeline: list[LeaseState],
        creates: dict[str, Write],
        submitters: list[Submitter],
    ) -> None:
        for s in submitters:
            if not s.stalled_rv:
                continue
            at = next((i for i, st in enumerate(window) if st.write.rv == s.stalled_rv), None)
            if at is None or window[at].holder not in s.holders:
                result.violations.append(
                    f"{s.tag} stalled at Lease rv {s.stalled_rv}, which is not its hold in the "
                    "audit log"
                )
                continue
            how, _ = self._ended(window, at, s)
            stall = str(s.plan.stall)
            result.stalls[f"{stall}:{how}"] += 1
            # Designed: taken over by the waiting dashboard, or cleared by the controller;
            # either is the hold ending at expiry, as is the staller's own release of its
            # expired hold on waking (a controller starved on a loaded machine).
            if how not in ("expired_takeover", "expired", "released"):
                result.violations.append(
                    f"{s.tag} stalled ({stall}) at Lease rv {s.stalled_rv}: its hold ended "
                    f"{how}, not at expiry; trace {s.trace[-8:]}"
                )
            if s.resumed_code is None:
                result.violations.append(f"{s.tag} never created a Job after its stall")
            elif s.resumed_code not in (200, 201):
                result.stalls_refused += 1
            else:
                # Admitted: only on a hold its user had then (a sibling replica's: Gate A's
                # holder is a user; the Gate A judge checks it), never on the stalled one.
                create = creates.get(s.resumed_job)
                then = state_before(timeline, create.rv) if create is not None else None
                if then is None or then.holder in s.holders:
                    result.violations.append(
                        f"{s.tag} woke from its stall and its Job {s.resumed_job} was admitted "
                        f"({s.resumed_code}) with its own hold "
                        f"{then.holder if then else '(no audit record)'} in the Lease"
                    )
                else:
                    result.stalls_admitted_by_sibling += 1

    @staticmethod
    def _ended(window: list[LeaseState], at: int, s: Submitter) -> tuple[str, float | None]:
        """How the hold written at ``window[at]`` ended, and how long after ``s`` died."""
        died = s.died_at
        held = window[at]
        for state in window[at + 1 :]:
            if state.holder == held.holder:
                continue
            w = state.write
            seconds = (w.answered - died).total_seconds() if died else None
            expiry = held.expiry(TERMS)
            if state.holder:
                live = expiry is not None and expiry > w.answered
                return ("taken_over_live" if live else "expired_takeover"), seconds
            if w.user == CONTROLLER_USER:
                # decided before its request arrived: before the expiry, on evidence
                early = expiry is not None and expiry > w.received
                return ("dead_holder" if early else "expired"), seconds
            return ("released" if w.user == s.username else "cleared_by_another"), seconds
        return "not_reclaimed", None

    def _judge_outcomes(self, result: ScheduleResult, submitters: list[Submitter]) -> None:
        for s in submitters:
            result.intrusions += s.intrusions
            result.intrusions_refused += s.intrusions_refused
            result.denials.update(s.denials)
            if s.outcome == "error":
                result.violations.append(f"{s.tag} ({s.plan.protocol}) failed: {s.error}")
            elif s.outcome == "ran":
                result.searches_ran += 1
            elif s.outcome != "crashed":
                result.violations.append(
                    f"{s.tag} ({s.plan.protocol}) never got its search in: {s.outcome}, "
                    f"created {sorted(s.created)}; trace {s.trace[-6:]}"
                )
