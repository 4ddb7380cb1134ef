"""Watches the demo's namespace on the API server and turns what it sees into timeline
events and measurements.

Jobs, the submit Lease, Events and the liveness ConfigMap are each watched (LIST +
WATCH, :mod:`testbed.watch`), so every change arrives in the order the API server
committed it. After *every* Job event the census (:func:`elbgate.census.census`, the
function the webhook admits with) runs over the Jobs as they stand after that commit:
that is how peak concurrency is measured, so "3" means the same on both sides.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from elbgate.census import census, is_terminal
from elbgate.job_status import true_conditions
from elbgate.lease import LeaseView
from elbgate.names import (
    APP_LABEL,
    FINALIZER_APP,
    JOB_ID_LABEL,
    LIVENESS_CONFIGMAP,
    lease_name,
)
from elbgate.settings import Settings
from testbed.api import Api
from testbed.demo.searches import short
from testbed.demo.timeline import Timeline
from testbed.watch import Watch

FAILED_CONDITIONS = frozenset({"Failed", "FailureTarget"})
RECLAIM_REASONS = {"LeaseHolderGoneReclaimed": "dead_holder", "LeaseExpiredReclaimed": "expired"}
ORPHAN_FLAGGED = "OrphanedFinalizer"
ORPHAN_DELETED = "OrphanedFinalizerDeleted"


@dataclass(frozen=True, slots=True)
class Reclaim:
    reason: str
    """``dead_holder`` or ``expired``."""
    message: str
    """The controller's Event message, which names the holder it cleared."""
    at: float
    """When the Event came (the controller posts it once the Lease is cleared)."""


@dataclass
class Observations:
    """What the observer saw; times are timeline seconds."""

    peak: int = 0
    opened: dict[str, float] = field(default_factory=dict)
    """elb-job-id -> when it first counted as active."""
    finished: dict[str, float] = field(default_factory=dict)
    """elb-job-id -> when its finalizer succeeded."""
    created: dict[str, float] = field(default_factory=dict)
    """Job name -> when it was created."""
    lease_holder: str = ""
    lease_handovers: int = 0
    """Times the Lease went to a new holder."""
    reclaims: list[Reclaim] = field(default_factory=list)
    orphans_flagged: dict[str, float] = field(default_factory=dict)
    """finalizer name -> when the controller's OrphanedFinalizer Event came (it marks
    the Job and warns in one step)."""
    controller_deleted: dict[str, float] = field(default_factory=dict)
    """finalizer name -> when the controller reported deleting it."""
    liveness: list[tuple[float, bool]] = field(default_factory=list)
    """(when, inUse) at every change of the liveness ConfigMap's inUse."""
    job_events: int = 0
    """Job events, each followed by a census of the Jobs as they then stood."""

    @property
    def in_use(self) -> bool | None:
        """The liveness ConfigMap's last inUse (``None`` before it exists)."""
        return self.liveness[-1][1] if self.liveness else None


@dataclass
class Observer:
    """Start with :meth:`attach`; read :attr:`seen`; wait with :meth:`wait_for`."""

    api: Api
    namespace: str
    settings: Settings
    timeline: Timeline
    names: Mapping[str, str]
    """elb-job-id -> who submitted it (filled in by the scenario before it submits)."""
    seen: Observations = field(default_factory=Observations)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _watches: list[Watch] = field(default_factory=list)

    def attach(self) -> None:
        """Start the watches and wait until each has listed what exists."""
        ns = self.namespace
        watched = [
            ("jobs", self._on_job, None),
            ("leases", self._on_lease, lease_name(ns)),
            ("events", self._on_event, None),
            ("configmaps", self._on_liveness, LIVENESS_CONFIGMAP),
        ]
        self._watches = [
            Watch(
                self.api,
                resource,
                self._handler(on),
                namespace=ns,
                field_selector=f"metadata.name={name}" if name else None,
            )
            for resource, on, name in watched
        ]
        for watch in self._watches:
            watch.start()

    def detach(self) -> None:
        for watch in self._watches:
            watch.stop()
        self._watches = []

    def wait_for(self, predicate: Callable[[Observations], bool], timeout: float) -> bool:
        """Block until ``predicate(seen)`` holds (True) or ``timeout`` passes (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.seen), timeout)

    def name_of(self, job_id: str) -> str:
        """``<submitter> (…<last 8 of id>)``."""
        who = self.names.get(job_id, "unknown submitter")
        return f"{who} (…{short(job_id)})"

    def _handler(self, on: Callable[[str, dict[str, Any]], None]) -> Callable[[str, Any], None]:
        def handle(kind: str, obj: dict[str, Any]) -> None:
            with self._changed:
                try:
                    on(kind, obj)
                except Exception as exc:  # reported in the summary
                    self.errors.append(exc)
                self._changed.notify_all()

        return handle

    # -- what each event means ----------------------------------------------------------

    def _on_job(self, kind: str, job: dict[str, Any]) -> None:
        seen, now = self.seen, self.timeline.elapsed()
        seen.job_events += 1
        meta = job["metadata"]
        name = meta["name"]
        before = self.jobs.get(name)
        if kind == "DELETED":
            self.jobs.pop(name, None)
        else:
            self.jobs[name] = job
        labels = meta.get("labels") or {}
        app, job_id = str(labels.get(APP_LABEL) or ""), str(labels.get(JOB_ID_LABEL) or "")
        counted = census(
            list(self.jobs.values()), datetime.now(UTC), self.settings.gate.finalizer_grace_seconds
        )
        seen.peak = max(seen.peak, counted.count)
        tally = f"{counted.count}/{self.settings.gate.max_run_concurrency} active"
        if kind == "ADDED" and before is None:
            seen.created.setdefault(name, now)
            for opened in counted.active_ids:
                if opened not in seen.opened:
                    seen.opened[opened] = now
                    holder = seen.lease_holder or "nobody"
                    self.timeline.emit(
                        "open",
                        f"search {self.name_of(opened)}: app={app} Job {name} admitted "
                        f"(Lease holder {brief(holder)}) -> {tally}",
                    )
        if kind == "MODIFIED" and is_terminal(job) and not (before and is_terminal(before)):
            if true_conditions(job) & FAILED_CONDITIONS:
                self.timeline.emit(
                    "failed", f"search {self.name_of(job_id)}: app={app} Job {name} failed"
                )
            elif app == FINALIZER_APP and job_id not in seen.finished:
                seen.finished[job_id] = now
                self.timeline.emit(
                    "done", f"search {self.name_of(job_id)}: finalizer {name} succeeded -> {tally}"
                )

    def _on_lease(self, kind: str, lease: dict[str, Any]) -> None:
        holder = "" if kind == "DELETED" else LeaseView.from_dict(lease).holder
        if holder and holder != self.seen.lease_holder:
            self.seen.lease_handovers += 1
        self.seen.lease_holder = holder

    def _on_event(self, kind: str, event: dict[str, Any]) -> None:
        if kind != "ADDED":
            return
        reason = str(event.get("reason") or "")
        message = str(event.get("message") or "")
        now = self.timeline.elapsed()
        involved = str((event.get("involvedObject") or {}).get("name") or "")
        if reason in RECLAIM_REASONS:
            self.seen.reclaims.append(Reclaim(RECLAIM_REASONS[reason], message, now))
            self.timeline.emit("reclaim", f"controller ({reason}): {message}")
        elif reason == ORPHAN_FLAGGED:
            self.seen.orphans_flagged.setdefault(involved, now)
            self.timeline.emit("orphan", f"controller ({reason}): {message}")
        elif reason == ORPHAN_DELETED:
            self.seen.controller_deleted.setdefault(involved, now)
            self.timeline.emit("gc", f"controller ({reason}): {message}")

    def _on_liveness(self, kind: str, configmap: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        data = configmap.get("data") or {}
        in_use = data.get("inUse") == "true"
        if self.seen.in_use == in_use:
            return
        self.seen.liveness.append((self.timeline.elapsed(), in_use))
        why = (
            f"activeSearches={data.get('activeSearches', '?')}, "
            f"leaseHolder={brief(data.get('leaseHolder') or '') or '-'}"
            if in_use
            else f"idleSince {data.get('idleSince', '?')}"
        )
        self.timeline.emit("liveness", f"{LIVENESS_CONFIGMAP}: inUse={str(in_use).lower()} ({why})")


def brief(holder: str) -> str:
    """``dashboard-3f2a…``: enough of a holder identity to tell them apart."""
    return holder if len(holder) <= 20 else holder[:18] + "…"
