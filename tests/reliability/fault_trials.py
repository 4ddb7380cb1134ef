"""Fault injection against the real webhook and controller (promise 2: fail closed).

* :func:`webhook_trial`: alice holds the Lease and there is room, so a search Job
  would be admitted — but a fault (error status, 429, latency past the deadline, a
  dropped connection) is injected on the census LIST and/or the Lease GET the webhook
  makes. Correct: refused (503, could not verify). Wrong: admitted.
* :func:`controller_trial`: a namespace with a live Lease (stamped holder pod, which
  exists), a live search (a running submit Job and its finalizer, past the finalizer
  grace) and one real orphan. A storm of random faults on every call the controller
  makes (LIST/WATCH, pod GET, Lease PUT, Job PATCH/DELETE, Event POST, ConfigMap
  writes, its leader Lease) plus watch 410s. Wrong: the live holder cleared, or a live
  Job marked or deleted (a decision on partial data).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from elbgate.lease import format_microtime
from elbgate.names import (
    HOLDER_POD_ANNOTATION,
    HOLDER_USER_ANNOTATION,
    ORPHANED_SINCE_ANNOTATION,
    lease_name,
)
from tests.kube_emulator import Emulator, Fault
from tests.reliability.api_calls import http, jobs_path
from tests.reliability.cluster import API_TIMEOUT_SECONDS, Rig, job_body

WEBHOOK_NS, CONTROLLER_NS = "faults-hook", "faults-ctl"
FAULTY_ENV = {
    "BLAST_FINALIZER_GRACE_SECONDS": "1",
    "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "1",
    "ELB_GATE_ORPHAN_POLICY": "delete",
}
"""A finalizer is past its grace after 1 s, and an orphan is deleted 1 s after being
flagged: the controller has live-looking and dead objects to tell apart at once."""
HANG_SECONDS = API_TIMEOUT_SECONDS + 1.0
"""Past the webhook's per-call deadline, inside the configuration's 5 s timeout."""
FAULT_KINDS: dict[str, dict[str, Any]] = {
    "500": {"status": 500},
    "503": {"status": 503},
    "429": {"status": 429},
    "504": {"status": 504},
    "hang": {"status": None, "delay": HANG_SECONDS},
    "drop": {"status": None, "drop": True},
}


@dataclass
class TrialResult:
    """One trial: faults that fired, and the outcomes that were wrong."""

    kind: str
    faults: int = 0
    wrong: list[str] = field(default_factory=list)
    codes: Counter[int] = field(default_factory=Counter)
    recovered: bool = True
    recovery_seconds: float = 0.0


def hold_lease(emu: Emulator, ns: str, user: str, pod_stamp: str = "", seconds: int = 600) -> str:
    """Make ``user`` the holder of ``ns``'s Lease directly (as if stamped by elb-gate)."""
    holder = f"openapi-{uuid.uuid4().hex}"
    stamp = format_microtime(datetime.now(UTC))
    annotations = {HOLDER_USER_ANNOTATION: user}
    if pod_stamp:
        annotations[HOLDER_POD_ANNOTATION] = pod_stamp
    existing = emu.find("leases", ns, lease_name(ns))
    body: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name(ns), "namespace": ns, "annotations": annotations},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }
    if existing is None:
        emu.create(body)
    else:
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        emu.update(body)
    return holder


def webhook_trial(rig: Rig, ns: str, rng: random.Random) -> TrialResult:
    """One gated Job created while the webhook's reads fail; it must not be admitted."""
    emu = rig.emu
    rig.reset_namespace(ns)
    hold_lease(emu, ns, "alice")
    if rng.random() < 0.5:  # one search already active: still room under the ceiling of 2
        emu.create(job_body(ns, f"busy-{uuid.uuid4().hex[:6]}", "blast", uuid.uuid4().hex))
    kind = rng.choice(list(FAULT_KINDS))
    target = rng.choice(("census", "lease", "both"))
    faults: list[Fault] = []
    if target in ("census", "both"):
        faults.append(
            emu.faults.add(
                method="GET", resource="jobs", namespace=ns, count=None, **FAULT_KINDS[kind]
            )
        )
    if target in ("lease", "both"):
        faults.append(
            emu.faults.add(
                method="GET",
                resource="leases",
                namespace=ns,
                name=lease_name(ns),
                count=None,
                **FAULT_KINDS[kind],
            )
        )
    app = rng.choice(("submit", "blast", "finalizer"))
    job = job_body(ns, f"t-{uuid.uuid4().hex[:8]}", app, uuid.uuid4().hex)
    result = TrialResult(f"webhook:{target}:{kind}")
    try:
        status, body = http(emu, "alice", "POST", jobs_path(ns), job)
    finally:
        for fault in faults:
            fault.remove()
    result.faults = sum(f.hits for f in faults)
    result.codes[status] += 1
    if status in (200, 201) and result.faults > 0:
        result.wrong.append(f"{result.kind}: {app} Job admitted without a completed check")
    elif status in (200, 201):
        result.wrong.append(f"{result.kind}: the fault never fired (trial proves nothing)")
    elif "could not verify" not in str(body.get("message")) and "failed calling webhook" not in str(
        body.get("message")
    ):
        result.wrong.append(
            f"{result.kind}: refused for another reason: {status} {body.get('message')}"
        )
    # Without the fault the same request is admitted: the refusal was the fault's doing.
    started = time.monotonic()
    status, body = http(emu, "alice", "POST", jobs_path(ns), job)
    result.recovered = status == 201
    result.recovery_seconds = time.monotonic() - started
    if not result.recovered:
        result.wrong.append(
            f"{result.kind}: not admitted once the API answered: {status} {body.get('message')}"
        )
    return result


# -- the controller ------------------------------------------------------------------------

CONTROLLER_TARGETS: tuple[dict[str, Any], ...] = (
    {"method": "GET", "resource": "jobs", "watch": False},
    {"method": "GET", "resource": "jobs", "watch": True},
    {"method": "GET", "resource": "leases", "watch": False},
    {"method": "GET", "resource": "leases", "watch": True},
    {"method": "GET", "resource": "configmaps"},
    {"method": "GET", "resource": "pods"},
    {"method": "PUT", "resource": "leases"},
    {"method": "PATCH", "resource": "jobs"},
    {"method": "PUT", "resource": "jobs"},
    {"method": "DELETE", "resource": "jobs"},
    {"method": "POST", "resource": "events"},
    {"method": "PUT", "resource": "configmaps"},
    {"method": "POST", "resource": "configmaps"},
    {"method": "PATCH", "resource": "configmaps"},
)


class LiveWatch:
    """Flags any write that treats live objects as dead, as it commits."""

    def __init__(self, emu: Emulator, ns: str, holder: str, live_jobs: set[str]) -> None:
        self.ns, self.holder, self.live_jobs = ns, holder, live_jobs
        self.wrong: list[str] = []
        self.orphan_deleted = threading.Event()
        self._unsubscribe = emu.subscribe(self._on_write)

    def close(self) -> None:
        self._unsubscribe()

    def _on_write(self, event: str, resource: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != self.ns:
            return
        name = str(meta.get("name"))
        if resource == "leases" and name == lease_name(self.ns):
            if (obj.get("spec") or {}).get("holderIdentity") != self.holder:
                self.wrong.append(f"live holder {self.holder} cleared ({event})")
        elif resource == "jobs" and name in self.live_jobs:
            if event == "DELETED":
                self.wrong.append(f"live Job {name} deleted")
            elif ORPHANED_SINCE_ANNOTATION in (meta.get("annotations") or {}):
                self.wrong.append(f"live Job {name} marked orphaned")
        elif resource == "jobs" and event == "DELETED" and name.startswith("orphan-"):
            self.orphan_deleted.set()


def controller_trial(
    rig: Rig, ns: str, rng: random.Random, storm_seconds: float = 4.0
) -> TrialResult:
    """A storm of faults on the controller's calls; nothing live may be cleared or deleted."""
    emu = rig.emu
    rig.reset_namespace(ns)
    pod = emu.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"holder-{uuid.uuid4().hex[:6]}", "namespace": ns},
        }
    )
    stamp = f"{ns}/{pod['metadata']['name']}/{pod['metadata']['uid']}"
    holder = hold_lease(emu, ns, "system:serviceaccount:x:submit", stamp)
    job_id = uuid.uuid4().hex
    live = {f"live-submit-{job_id[:6]}", f"live-finalizer-{job_id[:6]}"}
    emu.create(job_body(ns, f"live-submit-{job_id[:6]}", "submit", job_id))
    emu.create(job_body(ns, f"live-finalizer-{job_id[:6]}", "finalizer", job_id))
    emu.create(job_body(ns, f"orphan-{uuid.uuid4().hex[:6]}", "finalizer", uuid.uuid4().hex))
    watch = LiveWatch(emu, ns, holder, live)
    stop = threading.Event()

    def keep_renewing() -> None:
        # The holder is alive: it renews every 1.5 s, so the controller (1 s dead-holder
        # grace) keeps looking its pod up — and must never take a failed lookup for "gone".
        while not stop.wait(1.5):
            emu.patch(
                "leases",
                ns,
                lease_name(ns),
                lambda o: o["spec"].__setitem__("renewTime", format_microtime(datetime.now(UTC))),
            )

    renewer = threading.Thread(target=keep_renewing, daemon=True)
    renewer.start()
    result = TrialResult("controller:storm")
    faults: list[Fault] = []
    try:
        end = time.monotonic() + storm_seconds
        while time.monotonic() < end:
            target: dict[str, Any] = dict(rng.choice(CONTROLLER_TARGETS))
            kind = rng.choice(list(FAULT_KINDS))
            scope: dict[str, Any] = (
                {} if target["resource"] == "leases" and rng.random() < 0.3 else {"namespace": ns}
            )
            count = rng.choice((1, 2, 5, None))
            faults.append(emu.faults.add(**target, **scope, count=count, **FAULT_KINDS[kind]))
            if rng.random() < 0.25:
                emu.compact()  # the next re-watch from an old resourceVersion gets 410 Gone
                result.faults += 1
            time.sleep(rng.uniform(0.05, 0.3))
            for fault in [f for f in faults if f.remaining is None and rng.random() < 0.3]:
                fault.remove()
        result.faults += sum(f.hits for f in faults)
    finally:
        emu.faults.clear()
    # Recovery: the real orphan is deleted once the API answers again.
    started = time.monotonic()
    result.recovered = watch.orphan_deleted.wait(60)
    result.recovery_seconds = time.monotonic() - started
    stop.set()
    renewer.join(10)
    watch.close()
    result.wrong.extend(watch.wrong)
    if not result.recovered:
        result.wrong.append("the orphan was not deleted within 60 s of the faults ending")
    return result
