"""Fault injection against the real webhook and controller (promise 2: fail closed).

Both components reach the API server through a :class:`~testbed.faultproxy.FaultProxy`,
which answers chosen calls with an error status, a delay past the deadline, a dropped
connection, or (for a watch) 410 Gone.

* :func:`webhook_trial`: alice holds the namespace's Lease and there is room, so a
  search Job would be admitted — but a fault is injected on the census read (its LIST
  and its fence write) and/or the Lease GET the webhook makes. Correct: refused (could
  not verify: 503, or the API server's "failed calling webhook" when the webhook's
  answer came too late). Wrong: admitted. Then, faults cleared, the same request is
  admitted (the refusal was the fault's doing).
* :func:`controller_trial`: a namespace with a live holder (a Pod's ServiceAccount,
  stamped, renewing every 1.5 s), a live search (a running submit Job and its
  finalizer, past the finalizer grace) and one real orphan. A storm of random faults on
  every call the controller makes (LIST/WATCH, Pod and Node reads, Lease PUT/PATCH, Job
  PATCH/DELETE, Event POST, ConfigMap writes, its leader Lease) plus watch 410s. Wrong:
  the live holder cleared, or a live Job marked or deleted (a decision on partial
  data). Afterwards the orphan must still be deleted (the controller recovered).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from testbed.api import JsonObj
from testbed.clients import lease_name
from testbed.controlplane import ControlPlane
from testbed.faultproxy import Fault, FaultProxy
from testbed.reliability.calls import jobs_path, request
from testbed.reliability.jobs import running_job
from testbed.reliability.ledger import Ledger
from testbed.reliability.paths import DashboardPath
from testbed.reliability.rig import SHARED_ENV, Rig
from testbed.waiting import wait_until
from testbed.watch import Watch

FAULTY_ENV = {
    "BLAST_FINALIZER_GRACE_SECONDS": "1",
    "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "1",
    "ELB_GATE_ORPHAN_POLICY": "delete",
}
"""A finalizer is past its grace after 1 s, and an orphan is deleted 1 s after being
flagged: the controller has live-looking and dead objects to tell apart at once."""
FAULT_KINDS: dict[str, dict[str, Any]] = {
    "500": {"status": 500},
    "503": {"status": 503},
    "429": {"status": 429},
    "504": {"status": 504},
    # Past the webhook's per-call deadline, inside the configurations' 5 s timeout.
    "hang": {"delay": float(SHARED_ENV["ELB_GATE_API_TIMEOUT_SECONDS"]) + 1.0},
    "drop": {"drop": True},
}
ORPHAN_ANNOTATION = "elb-gate.io/orphaned-since"
REFUSALS = ("failed calling webhook", "could not verify")
"""What ``failurePolicy: Fail`` lets a fault cost: the apiserver could not call the
webhook (refused), or the webhook could not read what it needed (503, fail-closed)."""


@dataclass
class TrialResult:
    """One trial: faults that fired, and the outcomes that were wrong."""

    kind: str
    faults: int = 0
    wrong: list[str] = field(default_factory=list)
    codes: Counter[int] = field(default_factory=Counter)
    recovered: bool = True
    recovery_seconds: float = 0.0


def record(trials: Sequence[TrialResult], ledger: Ledger) -> None:
    """Record fault trials under promise 2 (shared by the bounded test and ``make soak``)."""
    kinds = Counter(r.kind.split(":")[0] for r in trials)
    ledger.record(
        "2",
        runs=len(trials),
        faults=sum(r.faults for r in trials),
        violations=sum(len(r.wrong) for r in trials),
        **{f"{kind}_trials": n for kind, n in kinds.items()},
    )


class Holder(DashboardPath):
    """``token``'s user holding ``namespace``'s Lease for ten minutes (the dashboard's
    path, so the webhook stamps it), and renewing it every 1.5 s once asked to."""

    def __init__(self, cp: ControlPlane, namespace: str, token: str) -> None:
        super().__init__(cp, token, namespace, ttl=600)
        wait_until(lambda: self.lease.acquire() in ("acquired", "renewed"), 120, "the Lease")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="holder-renew", daemon=True)

    def keep_renewing(self) -> None:
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(1.5):
            with suppress(Exception):  # a renewal that failed is retried at the next beat
                self.lease.acquire()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)


def webhook_trial(
    rig: Rig, proxy: FaultProxy, holder: Holder, ns: str, rng: random.Random
) -> TrialResult:
    """One gated Job created while the webhook's reads fail; it must not be admitted."""
    rig.reset_namespace(ns)
    if rng.random() < 0.5:  # one search already active: still room under the ceiling of 2
        code = holder.create_job(running_job(ns, f"busy-{uuid.uuid4().hex[:6]}", "blast", "busy"))
        if code not in (200, 201):
            raise AssertionError(f"could not seed a running search: {code}")
    kind = rng.choice(list(FAULT_KINDS))
    target = rng.choice(("census", "lease", "both"))
    calls: list[dict[str, str]] = []
    if target in ("census", "both"):
        # Every way the census is read: the LIST, and the write of the census fence
        # before a read from the webhook's own Job watch
        # (docs/design.md, "The census read at a fence").
        calls += [{"method": method, "resource": "jobs"} for method in ("GET", "PATCH")]
    if target in ("lease", "both"):
        calls.append({"method": "GET", "resource": "leases", "name": lease_name(ns)})
    faults = [proxy.add(**c, namespace=ns, count=None, **FAULT_KINDS[kind]) for c in calls]
    app = rng.choice(("setup", "submit", "blast", "finalizer"))
    job = running_job(ns, f"t-{uuid.uuid4().hex[:8]}", app, uuid.uuid4().hex)
    result = TrialResult(f"webhook:{target}:{kind}")
    try:
        status, body = request(holder.api, "POST", jobs_path(ns), job)
    finally:
        proxy.clear()
    result.faults = sum(f.fired for f in faults)
    result.codes[status] += 1
    message = str(body.get("message"))
    if status in (200, 201) and result.faults > 0:
        result.wrong.append(f"{result.kind}: {app} Job admitted without a completed check")
    elif status in (200, 201):
        result.wrong.append(f"{result.kind}: the fault never fired (the trial proves nothing)")
    elif not any(text in message for text in REFUSALS):
        result.wrong.append(f"{result.kind}: refused for another reason: {status} {message}")
    # Without the fault the same request is admitted: the refusal was the fault's doing.
    started = time.monotonic()
    status, body = request(holder.api, "POST", jobs_path(ns), job)
    result.recovered = status == 201
    result.recovery_seconds = time.monotonic() - started
    if not result.recovered:
        result.wrong.append(
            f"{result.kind}: not admitted once the API answered: {status} {body.get('message')}"
        )
    return result


CONTROLLER_TARGETS: tuple[dict[str, Any], ...] = (
    *(
        {"method": "GET", "resource": r, "watch": w}
        for r in ("jobs", "leases")
        for w in (False, True)
    ),
    *({"method": "GET", "resource": r} for r in ("pods", "nodes", "configmaps")),
    *(
        {"method": m, "resource": r}
        for m in ("PUT", "PATCH")
        for r in ("leases", "jobs", "configmaps")
    ),
    {"method": "DELETE", "resource": "jobs"},
    *({"method": "POST", "resource": r} for r in ("events", "configmaps")),
)
STORM_SECONDS = 4.0


class LiveWatch:
    """Flags any write in ``ns`` that treats live objects as dead, as the watches deliver it."""

    def __init__(self, cp: ControlPlane, ns: str, holder: str, live_jobs: set[str]) -> None:
        self.ns, self.holder, self.live_jobs = ns, holder, live_jobs
        self.wrong: list[str] = []
        self.orphan_deleted = threading.Event()
        self._watches = [
            Watch(cp.admin, "leases", self._on_lease, self._on_gap, namespace=ns),
            Watch(cp.admin, "jobs", self._on_job, self._on_gap, namespace=ns),
        ]
        for watch in self._watches:
            watch.start()

    def close(self) -> None:
        for watch in self._watches:
            watch.stop()

    def _on_gap(self, why: str) -> None:
        self.wrong.append(f"the trial's own watch lost continuity: {why}")

    def _on_lease(self, kind: str, obj: JsonObj) -> None:
        if kind != "LISTED" and (obj.get("metadata") or {}).get("name") == lease_name(self.ns):
            if (obj.get("spec") or {}).get("holderIdentity") != self.holder:
                self.wrong.append(f"live holder {self.holder} cleared ({kind})")

    def _on_job(self, kind: str, obj: JsonObj) -> None:
        meta = obj.get("metadata") or {}
        if kind == "LISTED":
            return
        name = str(meta.get("name"))
        if name in self.live_jobs:
            if kind == "DELETED":
                self.wrong.append(f"live Job {name} deleted")
            elif ORPHAN_ANNOTATION in (meta.get("annotations") or {}):
                self.wrong.append(f"live Job {name} marked orphaned")
        elif kind == "DELETED" and name.startswith("orphan-"):
            self.orphan_deleted.set()


def controller_trial(
    rig: Rig,
    proxy: FaultProxy,
    ns: str,
    rng: random.Random,
) -> TrialResult:
    """A storm of faults on the controller's calls; nothing live may be cleared or deleted."""
    cp = rig.cp
    rig.reset_namespace(ns)
    holder = Holder(cp, ns, cp.pod_identity(ns, "openapi-submit").token)
    job_id = uuid.uuid4().hex
    live = {app: f"live-{app}-{job_id[:6]}" for app in ("submit", "finalizer")}
    for app, name in live.items():
        code = holder.create_job(running_job(ns, name, app, job_id))
        if code not in (200, 201):
            raise AssertionError(f"could not create the live {app} Job: {code}")
    orphan = running_job(ns, f"orphan-{uuid.uuid4().hex[:6]}", "finalizer", uuid.uuid4().hex)
    if holder.create_job(orphan) not in (200, 201):
        raise AssertionError("could not create the orphan")
    watch = LiveWatch(cp, ns, holder.lease.holder, set(live.values()))
    # The holder is alive: it renews every 1.5 s, so the controller keeps judging its
    # pod — and must never take a failed lookup for "gone".
    holder.keep_renewing()
    result = TrialResult("controller:storm")
    faults: list[Fault] = []
    try:
        end = time.monotonic() + STORM_SECONDS
        while time.monotonic() < end:
            target: dict[str, Any] = dict(rng.choice(CONTROLLER_TARGETS))
            kind = rng.choice(list(FAULT_KINDS))
            # Nodes are cluster-scoped; Leases are at times faulted everywhere (the leader's too).
            if target["resource"] != "nodes" and not (
                target["resource"] == "leases" and rng.random() < 0.3
            ):
                target["namespace"] = ns
            count = rng.choice((1, 2, 5, None))
            faults.append(proxy.add(**target, count=count, **FAULT_KINDS[kind]))
            if rng.random() < 0.25:
                resource = rng.choice(("jobs", "leases", "pods"))
                faults.append(proxy.add(resource=resource, watch=True, watch_gone=True, count=1))
            time.sleep(rng.uniform(0.05, 0.3))
            for fault in [f for f in faults if f.count is None and rng.random() < 0.3]:
                fault.count = fault.fired  # spent: it fires no more
        result.faults = sum(f.fired for f in faults)
    finally:
        proxy.clear()
    # Recovery: the real orphan is deleted once the API answers again.
    started = time.monotonic()
    result.recovered = watch.orphan_deleted.wait(90)
    result.recovery_seconds = time.monotonic() - started
    holder.stop()
    watch.close()
    result.wrong.extend(watch.wrong)
    if not result.recovered:
        result.wrong.append("the orphan was not deleted within 90 s of the faults ending")
    with suppress(Exception):  # the next trial takes over after expiry at worst
        holder.lease.release()
    return result
