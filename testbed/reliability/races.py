"""Race schedules whose histories the linearizability checker judges.

Each history runs in a namespace of its own (a slot, emptied before), on the
reliability rig: two webhook replicas behind a router that picks one per request
(:mod:`testbed.router`), their API calls through a fault proxy, and the controller. The
router sends every request of a history to one replica (:attr:`Plan.replica`), but in
every other round of the kinds (:attr:`Plan.paired`) it holds the race's first two Job
creates until both have come and sends one to each replica: half the races are judged
by the two replicas at once, half by one, by construction. A kind says what races:

* ``one_identity``: one holder's user sends two searches' first Jobs at once, with one
  search running and sometimes one finishing as they arrive;
* ``siblings``: two sibling processes of the holder's user (a dashboard's workers share
  one credential) send first Jobs at once while the holder renews;
* ``stagings``: two searches stage one database at once;
* ``stalled_wakes``: a holder stops renewing, and wakes to send its first Job just as
  another takes the expired hold over, then again just as the new holder sends its own;
* ``controller_down_ttl``: with no controller running, a search's batch Job finishes
  and is TTL-deleted while its finalizer runs; first Jobs race; the controller starts;
* ``finalizer_grace``: a search's finalizer and an orphan finalizer pass their grace
  while first Jobs race, the controller up (orphan policy ``delete``).

Faults are drawn per history for the webhooks' own API calls in its namespace
(delayed or dropped LISTs, a refused or unanswered admission record write). The
history is what the API server recorded, whatever the schedule intended.
"""

from __future__ import annotations

import functools
import random
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from testbed.api import Api, ApiError, JsonObj
from testbed.audit_log import read_audit
from testbed.clients import ClientError, DashboardLeaseClient
from testbed.controller_process import CONTROLLER_USER
from testbed.controlplane import ControlPlane
from testbed.faultproxy import Fault, FaultProxy
from testbed.reliability.calls import jobs_path, request
from testbed.reliability.gate_a import LEASE_PREFIX
from testbed.reliability.histories import History, JobWatch, audit_operations
from testbed.reliability.jobs import JobPlan, job_body, job_name
from testbed.reliability.rig import CEILING, CONTROLLER_ENV, SKEW_SECONDS, Rig, each_on_a_slot
from testbed.waiting import at_once, wait_until

KINDS: tuple[str, ...] = (
    "one_identity",
    "siblings",
    "stagings",
    "stalled_wakes",
    "controller_down_ttl",
    "finalizer_grace",
)
CONTROLLER_KINDS = frozenset({"controller_down_ttl"})
"""Kinds that stop the controller: run together, apart from the others."""
GRACE_SECONDS = 6
RACES_ENV = {
    "BLAST_FINALIZER_GRACE_SECONDS": str(GRACE_SECONDS),
    "ELB_GATE_ORPHAN_POLICY": "delete",
    "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "1",
}
"""A finalizer passes its grace within a history; an orphan is deleted 1 s after it is
flagged."""
HOLD_SECONDS = 20
FAULT_CALLS: dict[str, dict[str, Any]] = {
    "slow_list": {"method": "GET", "resource": "jobs"},  # and a delay drawn per history
    "dropped_list": {"method": "GET", "resource": "jobs", "drop": True},
    "record_503": {"method": "GET", "resource": "configmaps", "status": 503},
    "record_lost": {"method": "PUT", "resource": "configmaps", "lose_answer": True},
    "lagging_watch": {"resource": "jobs", "watch": True, "count": None},  # and a lag
    "fence_503": {"method": "PATCH", "resource": "jobs", "status": 503},
    "fence_lost": {"method": "PATCH", "resource": "jobs", "lose_answer": True},
}
"""Faults on the webhooks' calls: the census LIST (and the Job watch's own LIST and
WATCH requests), the admission record, and the census read at a fence (docs/design.md,
"The census read at a fence"): its watch's events passed on late, its fence write
refused or its answer lost."""
FAULTS: tuple[str, ...] = ("none", *FAULT_CALLS)


def settings() -> dict[str, Any]:
    return {
        "ceiling": CEILING,
        "grace_ns": GRACE_SECONDS * 1_000_000_000,
        "skew_ns": int(SKEW_SECONDS * 1e9),
        "controller_users": [CONTROLLER_USER],
    }


def _id() -> str:
    return uuid.uuid4().hex[:8]


def job(
    ns: str, app: str, job_id: str, *, run: float, db: str = "core_nt", ttl: int | None = None
) -> JsonObj:
    """One of elastic-blast's Jobs whose pod runs ``run`` seconds and succeeds."""
    return job_body(ns, JobPlan(app, job_name(app, job_id), run, "ok", ttl), job_id, db)


def create(api: Api, body: JsonObj) -> int:
    return request(api, "POST", jobs_path(body["metadata"]["namespace"]), body)[0]


@dataclass(frozen=True)
class Plan:
    seed: int
    kind: str
    fault: str
    paired: bool
    """The race's first two Job creates go to the two replicas together."""
    replica: int
    """Where every other request of the history goes."""


def plan(seed: int) -> Plan:
    """The seed's race: its kind round-robin, a fault on the webhooks' calls drawn, every
    other round of the kinds paired, and its replica every other two rounds."""
    kind = KINDS[seed % len(KINDS)]
    fault = "none" if kind in CONTROLLER_KINDS else random.Random(f"race-{seed}").choice(FAULTS)
    round_ = seed // len(KINDS)
    return Plan(seed, kind, fault, paired=round_ % 2 == 0, replica=round_ // 2 % 2)


class Races:
    """Runs race schedules on a rig and records their histories."""

    def __init__(self, rig: Rig, proxy: FaultProxy, watch: JobWatch) -> None:
        assert rig.router is not None, "the race rig routes per request"
        self.rig = rig
        self.router = rig.router
        self.cp = rig.cp
        self.proxy = proxy
        self.watch = watch
        self._holders: dict[str, list[DashboardLeaseClient]] = {}
        self._paired: set[str] = set()
        """Namespaces whose history pairs its race (:attr:`Plan.paired`)."""
        self._lock = threading.Lock()

    # -- faults --------------------------------------------------------------------------

    def _inject(self, ns: str, fault: str, rng: random.Random) -> Fault | None:
        # The count is drawn for every fault, none too: the history's own draws follow it.
        how = {"namespace": ns, "count": rng.choice((1, 2)), **FAULT_CALLS.get(fault, {})}
        if fault == "none":
            return None
        if fault == "slow_list":
            how["delay"] = rng.uniform(0.2, 1.2)
        if fault == "lagging_watch":
            how["lag"] = rng.uniform(0.2, 1.2)
        added = self.proxy.add(**how)
        if fault == "lagging_watch":
            self.proxy.end_watches()  # the webhooks resume their Job watches through it
        return added

    # -- holds ---------------------------------------------------------------------------

    def hold(self, ns: str, user: str, ttl: int = HOLD_SECONDS) -> DashboardLeaseClient:
        client = self.holder(ns, user, ttl)
        wait_until(
            lambda: client.acquire() in ("acquired", "renewed"),
            120,
            f"{user} to hold the Lease of {ns}",
            interval=0.5,
        )
        return client

    def holder(self, ns: str, user: str, ttl: int = HOLD_SECONDS) -> DashboardLeaseClient:
        """A Lease client for ``user``, released when the history ends (the next
        history in the namespace need not wait for its hold to expire)."""
        client = DashboardLeaseClient.on(self.cp, user, ns, ttl=ttl)
        with self._lock:
            self._holders.setdefault(ns, []).append(client)
        return client

    def _fresh_lease(self, ns: str) -> None:
        """Delete the (released) Lease, so this history's first holder creates it with
        its own duration: the dashboard's client keeps the stored one on a takeover."""
        lease = f"{LEASE_PREFIX}{ns}"

        def deleted() -> bool:
            try:  # a missing Lease is no error
                self.cp.admin.delete("leases", ns, lease)
            except ApiError:
                return False  # refused: try again
            return self.cp.admin.find("leases", ns, lease) is None

        wait_until(deleted, 120, f"the Lease of {ns} free and deleted", interval=0.5)

    def release(self, ns: str) -> None:
        with self._lock:
            clients = self._holders.pop(ns, [])
        for client in clients:
            with suppress(OSError, ClientError):
                client.release()

    # -- one history ---------------------------------------------------------------------

    def run(self, p: Plan, ns: str) -> History:
        rng = random.Random(f"race-run-{p.seed}")
        self.rig.reset_namespace(ns)
        self._fresh_lease(ns)
        self.watch.forget(ns)
        offset = self.cp.audit_log.stat().st_size
        fault = self._inject(ns, p.fault, rng)
        with self._lock:
            (self._paired.add if p.paired else self._paired.discard)(ns)
        self.router.pin(ns, p.replica)
        try:
            getattr(self, f"_{p.kind}")(ns, rng)
        finally:
            self.proxy.clear(ns)
            self.release(ns)
        fired = fault.fired if fault is not None else 0
        h = History(f"{p.kind}-{p.seed}", p.kind, settings(), ns, offset, p.fault, fired)
        h.paired = p.paired
        self.record(h)
        return h

    def record(self, h: History) -> None:
        """(Re)read the history from the audit log and the watch."""
        time.sleep(1.0)  # the last watch events and audit lines land
        if lost := self.watch.lost(h.namespace):
            # Missed events would widen the Jobs' finishes: the check would pass
            # histories it cannot see whole.
            raise RuntimeError(f"{h.name}: the Job watch lost events ({'; '.join(lost)})")
        events, _ = read_audit(self.cp.audit_log, h.audit_offset)
        ops = audit_operations(events, h.namespace, self.watch.stored(h.namespace))
        h.operations = ops + self.watch.finishes(h.namespace)
        h.outcomes = self.watch.outcomes(h.namespace)
        h.split = split(ops, self.judged_by(h.namespace))

    def judged_by(self, ns: str) -> dict[str, int]:
        """Which webhook replica (index) logged the admission of each Job of ``ns``."""
        return {
            str(record.get("name")): index
            for index, hook in enumerate(self.rig.hooks)
            for record in hook.logs("admission")
            if record.get("namespace") == ns
        }

    def _race(self, ns: str, calls: Sequence[Callable[[], object]], pair: bool = True) -> None:
        """``calls`` at once; ``pair``: their first two Job creates are the race the router
        pairs, if this history pairs its race."""
        with self._lock:
            paired = pair and ns in self._paired
        if paired:
            self.router.pair(ns)
        for outcome in at_once(calls):
            if isinstance(outcome, Exception):  # the history judges what was recorded
                traceback.print_exception(outcome)

    def _first_jobs(
        self,
        ns: str,
        user: str,
        apps: Sequence[str] = ("submit", "submit"),
        also: Sequence[Callable[[], object]] = (),
        pair: bool = True,
    ) -> None:
        """``user``'s first Jobs of ``apps`` sent at once, with the calls ``also``."""
        api = self.cp.api(user)
        creates = [functools.partial(create, api, job(ns, a, _id(), run=60)) for a in apps]
        self._race(ns, [*creates, *also], pair)

    def _hold_and_seed(self, ns: str, user: str, rng: random.Random) -> DashboardLeaseClient:
        """``user`` holds the Lease and runs one search short of the ceiling."""
        holder = self.hold(ns, user)
        api = self.cp.api(user)
        for _ in range(CEILING - 1):
            create(api, job(ns, "blast", _id(), run=60))
        if rng.random() < 0.6:  # one more search, finishing about when the race starts
            create(api, job(ns, "blast", _id(), run=round(rng.uniform(0.5, 2.5), 1)))
            time.sleep(rng.uniform(0.5, 2.5))
        return holder

    def _one_identity(self, ns: str, rng: random.Random) -> None:
        self._hold_and_seed(ns, "alice", rng)
        apps = rng.choice([("submit", "submit"), ("submit", "setup"), ("blast", "finalizer")])
        self._first_jobs(ns, "alice", apps)

    def _siblings(self, ns: str, rng: random.Random) -> None:
        # dashboard-lease is the one credential the workers share.
        holder = self._hold_and_seed(ns, "dashboard-lease", rng)
        self._first_jobs(ns, "dashboard-lease", also=[holder.acquire])

    def _stagings(self, ns: str, rng: random.Random) -> None:
        self.hold(ns, "alice")
        db = rng.choice(("core_nt", "16S_ribosomal_RNA"))
        bodies = [job(ns, "setup", _id(), run=30, db=db) for _ in range(2)]
        if rng.random() < 0.4:
            bodies.append(job(ns, "setup", _id(), run=30, db="swissprot"))
        alice = self.cp.api("alice")
        self._race(ns, [functools.partial(create, alice, b) for b in bodies])

    def _stalled_wakes(self, ns: str, rng: random.Random) -> None:
        ttl = 2
        self.hold(ns, "carol", ttl=ttl)
        # carol stalls: no renewal; she wakes about when her hold has expired.
        time.sleep(ttl + SKEW_SECONDS + rng.uniform(-0.3, 0.6))
        taker = self.holder(ns, "bob")
        self._first_jobs(ns, "carol", ["submit"], also=[taker.acquire], pair=False)
        # bob waits for the hold (the webhook's clock may not call it expired yet),
        # and opens his search just as carol, still awake, tries once more under his
        # hold: the two first Jobs race.
        wait_until(
            lambda: taker.acquire() in ("acquired", "renewed"),
            60,
            f"bob to take the expired hold of {ns} over",
            interval=0.3,
        )
        late = functools.partial(create, self.cp.api("carol"), job(ns, "submit", _id(), run=60))
        self._first_jobs(ns, "bob", ["submit"], also=[late])

    def _controller_down_ttl(self, ns: str, rng: random.Random) -> None:
        # The controller is stopped by the caller (one outage for every such history).
        self.hold(ns, "alice")
        # A search whose batch work finishes and is TTL-deleted at once while its
        # finalizer runs on, and an orphan finalizer (no batch work ever).
        api, work = self.cp.api("alice"), _id()
        create(api, job(ns, "submit", work, run=0.5, ttl=1))
        create(api, job(ns, "finalizer", work, run=120))
        create(api, job(ns, "finalizer", _id(), run=120))
        wait_until(
            lambda: self.cp.admin.find("jobs", ns, job_name("submit", work)) is None,
            120,
            f"the TTL controller to delete the submit Job of {ns}",
            interval=0.5,
        )
        time.sleep(GRACE_SECONDS + rng.uniform(-2.0, 1.0))
        self._first_jobs(ns, "alice")

    def _finalizer_grace(self, ns: str, rng: random.Random) -> None:
        self._controller_down_ttl(ns, rng)  # the same race, with the controller up
        self.after_outage()  # the controller flags and deletes orphans

    def after_outage(self) -> None:
        """With the controller back: time to act on what it finds (it must not delete
        a running search's finalizer)."""
        time.sleep(4 + self.rig.resync_seconds)


@contextmanager
def races_on(cp: ControlPlane, slots: Sequence[str]) -> Iterator[Races]:
    """The race rig on ``slots``: both webhook replicas behind the router and the
    controller with :data:`RACES_ENV`, their API calls through a fault proxy, and a watch
    of the slots' Jobs."""
    with (
        FaultProxy(cp) as proxy,
        Rig(
            cp,
            slots,
            env=RACES_ENV,
            controller_env={**CONTROLLER_ENV, **RACES_ENV},
            proxy=proxy,
            per_request=True,
        ) as rig,
    ):
        rig.wait_until_ready()
        watch = JobWatch(cp.admin, slots).start()
        try:
            yield Races(rig, proxy, watch)
        finally:
            watch.stop()


def overlapping(ops: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """The names of each two Job creates among ``ops`` that were in the API server at once
    (by its own times)."""
    creates = [o for o in ops if o["kind"] == "create"]
    for i, a in enumerate(creates):
        for b in creates[i + 1 :]:
            if a["call"] < b["return"] and b["call"] < a["return"]:
                yield a["job"]["name"], b["job"]["name"]


def split(ops: Sequence[Mapping[str, Any]], judged: Mapping[str, int]) -> bool:
    """Whether two Job creates that overlapped in time were judged by different replicas."""
    return any(a in judged and b in judged and judged[a] != judged[b] for a, b in overlapping(ops))


def run_all(
    races: Races,
    seeds: Sequence[int],
    slots: Sequence[str],
    on_error: Callable[[Plan, Exception], None] | None = None,
) -> list[History]:
    """Every seed's history, the kind chosen round-robin; controller-down kinds in
    one outage, at the end.

    A history the harness could not finish goes to ``on_error`` and is left out, or is
    raised (:func:`~testbed.reliability.rig.each_on_a_slot`)."""
    plans = [plan(s) for s in seeds]
    normal = [p for p in plans if p.kind not in CONTROLLER_KINDS]
    outage = [p for p in plans if p.kind in CONTROLLER_KINDS]
    out = list(each_on_a_slot(normal, slots, races.run, on_error))
    rig = races.rig
    for start in range(0, len(outage), len(slots)):
        chunk = outage[start : start + len(slots)]
        for ctl in rig.controllers:
            ctl.stop()
        before = len(out)
        try:
            out += each_on_a_slot(chunk, slots, races.run, on_error)
        finally:
            rig.start_controller(0)
            rig.wait_for_leader()
        # These histories end after the controller acted on what it found.
        races.after_outage()
        for h in out[before:]:
            races.record(h)
    return out
