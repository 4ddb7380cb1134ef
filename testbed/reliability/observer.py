"""Watch every Job and Lease write and check the promises after each one.

Two cluster-wide watches (Jobs, Leases) deliver every committed state in
resourceVersion order. Per watched namespace, after every Job event the observer
counts the active searches twice — with :mod:`testbed.reliability.oracle` (its own
code, from the documented definition) and with ``elbgate.census`` (the code under
test) — plus the crude bound, on the same Jobs at the same instant:

* the oracle's count above the ceiling is an over-admission (a violation, printed with
  the Jobs that make up the count);
* any difference between the oracle's and the census's active searches is a finding,
  printed with the Jobs of the searches they disagree on;
* the oracle above the crude bound would be a bug in the oracle itself.

It also records each Job's ADDED event with whether its search was active just before
(so the Gate A judge knows which CREATEs Gate A applied to), every Lease revision it
saw and every Lease it saw deleted (so the judge can check the audit log has them all,
and place each delete at its revision). Gate A itself is judged
from the audit log at the end of a schedule (:mod:`testbed.reliability.gate_a`).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from elbgate.census import census
from testbed.api import Api, JsonObj
from testbed.reliability import oracle
from testbed.reliability.audit import Seen
from testbed.reliability.rig import CEILING, FINALIZER_GRACE_SECONDS
from testbed.waiting import wait_until
from testbed.watch import Watch

SENTINEL_NAMESPACE = "reliability-sync"
SENTINEL = "sync"


@dataclass(frozen=True)
class Added:
    """A Job's ADDED event: the revision it committed at, and its search then."""

    rv: int
    name: str
    app: str
    key: str | None
    active_before: bool
    """Its search was active (by the oracle) just before this Job committed."""
    obj: JsonObj


@dataclass
class NamespaceRecord:
    """What the observer saw in one namespace while it was watched."""

    namespace: str
    job_events: int = 0
    max_active: int = 0
    max_crude: int = 0
    violations: list[str] = field(default_factory=list)
    """Over-admissions, oracle bugs and lost watch continuity, as they happened."""
    disagreements: list[str] = field(default_factory=list)
    added: list[Added] = field(default_factory=list)
    leases: list[Seen] = field(default_factory=list)
    """The Lease writes it saw (``ADDED``/``MODIFIED``)."""
    lease_deletes: dict[str, int] = field(default_factory=dict)
    """Leases it saw deleted: ``uid`` → the revision of the ``DELETED`` event (the audit
    log's record of a delete names the ``uid``, not the revision)."""
    disagreement_count: int = 0


def _rv(obj: Mapping[str, Any]) -> int:
    return int(str((obj.get("metadata") or {}).get("resourceVersion") or "0"))


def _brief(job: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a Job that decide whether it counts (for a finding's printout)."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    return {
        "name": meta.get("name"),
        "labels": meta.get("labels"),
        "created": meta.get("creationTimestamp"),
        "rv": meta.get("resourceVersion"),
        "spec": {k: spec.get(k) for k in ("completions", "parallelism", "suspend") if k in spec},
        "status": job.get("status") or {},
    }


class Observer:
    """Watches Jobs and Leases in ``namespaces``; records are opened per schedule."""

    MAX_PRINTED = 20
    """Findings kept in full per record (the count keeps going)."""

    def __init__(
        self,
        admin: Api,
        namespaces: Iterable[str],
        *,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.admin = admin
        self.namespaces = set(namespaces)
        self.report = report or (lambda text: None)
        self._jobs: dict[str, dict[str, JsonObj]] = {ns: {} for ns in self.namespaces}
        self._active: dict[str, set[str]] = {ns: set() for ns in self.namespaces}
        self._records: dict[str, NamespaceRecord] = {}
        self._lease_rvs: dict[tuple[str, str], int] = {}
        """Each Lease's last revision seen (a write's previous one)."""
        self._lock = threading.Lock()
        self._sentinel_lock = threading.Lock()
        self._watches = [
            Watch(admin, "jobs", self._on_job, self._on_gap),
            Watch(admin, "leases", self._on_lease, self._on_gap),
        ]

    def start(self) -> Observer:
        self._make_sentinels()
        for watch in self._watches:
            watch.start()
        return self

    def stop(self) -> None:
        for watch in self._watches:
            watch.stop()

    def current_rv(self, namespace: str) -> int:
        """The store's revision now (a quorum LIST answers with it)."""
        body = self.admin.request(
            "GET", self.admin.resource("leases").path(namespace), query={"limit": 1}
        )
        return int(body["metadata"]["resourceVersion"])

    def sync(self) -> int:
        """Write a sentinel Lease and a sentinel Job now and wait until both watches have
        delivered them: every write committed before this call has then been seen.
        Returns the first sentinel's revision."""
        stamp = {"metadata": {"annotations": {"reliability.elb-gate.io/sync": uuid.uuid4().hex}}}
        with self._sentinel_lock:
            lease = self.admin.patch("leases", SENTINEL_NAMESPACE, SENTINEL, stamp)
            job = self.admin.patch("jobs", SENTINEL_NAMESPACE, SENTINEL, stamp)
        marks = [_rv(lease), _rv(job)]
        wait_until(
            lambda: all(
                int(w.resource_version or 0) >= m for w, m in zip(self._watches, marks, strict=True)
            ),
            120,
            f"the watches to deliver revisions {marks}",
            interval=0.05,
        )
        return min(marks)

    def _make_sentinels(self) -> None:
        """A Lease and a suspended Job in a namespace of their own (no webhook sees them:
        the namespace is not gated; the Job never runs a pod)."""
        meta = {"name": SENTINEL, "namespace": SENTINEL_NAMESPACE}
        idle = {"restartPolicy": "Never", "containers": [{"name": "idle", "image": "idle:1"}]}
        for obj in (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SENTINEL_NAMESPACE}},
            {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta},
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": meta,
                "spec": {"suspend": True, "template": {"spec": idle}},
            },
        ):  # made once per control plane: a later observer finds them there
            self.admin.create_once(obj)

    def watch(self, namespace: str) -> NamespaceRecord:
        """Check ``namespace`` against the rig's ceiling and finalizer grace from now on."""
        record = NamespaceRecord(namespace)
        with self._lock:
            self._records[namespace] = record
        return record

    def unwatch(self, namespace: str) -> NamespaceRecord | None:
        with self._lock:
            return self._records.pop(namespace, None)

    # -- events ----------------------------------------------------------------------------

    def _on_gap(self, why: str) -> None:
        with self._lock:
            for record in self._records.values():
                record.violations.append(f"observer: {why}")
            for jobs in self._jobs.values():
                jobs.clear()

    def _on_lease(self, kind: str, obj: JsonObj) -> None:
        meta = obj.get("metadata") or {}
        ns, name, rv = str(meta.get("namespace") or ""), str(meta.get("name") or ""), _rv(obj)
        with self._lock:
            record = self._records.get(ns)
            if record is not None and kind in ("ADDED", "MODIFIED"):
                previous = self._lease_rvs.get((ns, name)) if kind == "MODIFIED" else None
                record.leases.append(Seen(rv, "leases", name, previous, obj))
            if kind != "DELETED":
                self._lease_rvs[ns, name] = rv
            elif record is not None:
                self._lease_rvs.pop((ns, name), None)
                record.lease_deletes[str(meta.get("uid") or "")] = rv

    def _on_job(self, kind: str, obj: JsonObj) -> None:
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), meta.get("name")
        if ns not in self.namespaces:
            return
        uid = str(meta.get("uid") or "")
        with self._lock:
            jobs = self._jobs[ns]
            if kind == "DELETED":
                jobs.pop(uid, None)
            else:
                jobs[uid] = obj
            record = self._records.get(ns)
            now = datetime.now(UTC)
            found = oracle.active_searches(jobs.values(), now, FINALIZER_GRACE_SECONDS)
            keys = [a.key for a in found]
            before, self._active[ns] = self._active[ns], set(keys)
            if record is None or kind == "LISTED":
                return
            try:  # a bug here must show as a finding, not vanish
                record.job_events += 1
                rv = _rv(obj)
                if kind == "ADDED":
                    key = oracle.search_key(obj)
                    app = str((meta.get("labels") or {}).get("app") or "")
                    record.added.append(Added(rv, str(name), app, key, key in before, obj))
                crude = oracle.crude_bound(jobs.values())
                record.max_active = max(record.max_active, len(keys))
                record.max_crude = max(record.max_crude, len(crude))
                where = f"after {kind} Job {name} (rv {rv})"
                if len(keys) > CEILING:
                    why = "; ".join(f"{a.key}: {a.why}" for a in found)
                    record.violations.append(
                        f"{len(keys)} active searches > ceiling {CEILING} {where}: {why}"
                    )
                if not set(keys) <= crude:
                    record.violations.append(
                        f"oracle {keys} above the crude bound {sorted(crude)} {where}"
                    )
                counted = list(census(jobs.values(), now, FINALIZER_GRACE_SECONDS).active_ids)
                if counted != keys:
                    record.disagreement_count += 1
                    differ = set(counted) ^ set(keys)
                    involved = [
                        _brief(j) for j in jobs.values() if (oracle.search_key(j) or "") in differ
                    ]
                    text = (
                        f"{ns} {where}: census {counted}, oracle {keys}; Jobs: "
                        f"{json.dumps(involved or [*map(_brief, jobs.values())], sort_keys=True)}"
                    )
                    self.report(f"DISAGREEMENT {text}")
                    if len(record.disagreements) < self.MAX_PRINTED:
                        record.disagreements.append(text)
            except Exception as exc:
                record.violations.append(f"observer failed on {kind} {name}: {exc!r}")
