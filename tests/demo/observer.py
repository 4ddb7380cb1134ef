"""Watches every committed write in the emulator and turns it into timeline events
and measurements.

Registered with ``emu.subscribe``, so it runs after each write, in commit order,
while the emulator's store is still locked: a LIST made here sees exactly the
committed state that write produced. Peak concurrency is therefore measured with
``elbgate.census`` on the live Jobs after *every* Job write — the same function
the webhook admits with, so "3" means the same thing on both sides.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from elbgate.census import census, is_terminal
from elbgate.lease import LeaseView
from elbgate.names import (
    APP_LABEL,
    COMPANION_APPS,
    FINALIZER_APP,
    JOB_ID_LABEL,
    LIVENESS_CONFIGMAP,
    ORPHANED_SINCE_ANNOTATION,
    lease_name,
)
from elbgate.settings import Settings
from tests.demo.jobs import short
from tests.demo.timeline import Timeline
from tests.kube_emulator import Emulator

RECLAIM_REASONS = {"LeaseHolderGoneReclaimed": "dead_holder", "LeaseExpiredReclaimed": "expired"}
ORPHAN_FLAGGED = "OrphanedFinalizer"
ORPHAN_DELETED = "OrphanedFinalizerDeleted"


@dataclass(frozen=True, slots=True)
class Reclaim:
    at: float
    reason: str
    """``dead_holder`` or ``expired``."""
    holder: str
    message: str


@dataclass
class Observations:
    """What the observer saw; times are timeline seconds."""

    peak: int = 0
    peak_ids: tuple[str, ...] = ()
    active: tuple[str, ...] = ()
    opened: dict[str, float] = field(default_factory=dict)
    """elb-job-id -> when it first counted as active."""
    finished: dict[str, float] = field(default_factory=dict)
    """elb-job-id -> when its finalizer succeeded."""
    jobs_created: int = 0
    created: dict[str, float] = field(default_factory=dict)
    """Job name -> when it was created."""
    lease_holder: str = ""
    lease_handovers: int = 0
    """Times the Lease went to a new holder."""
    reclaims: list[Reclaim] = field(default_factory=list)
    orphans_flagged: dict[str, float] = field(default_factory=dict)
    """finalizer name -> when the controller flagged it."""
    orphans_deleted: dict[str, float] = field(default_factory=dict)
    """finalizer name -> when it was deleted."""
    liveness: list[tuple[float, bool]] = field(default_factory=list)
    """(when, inUse) at every change of the liveness ConfigMap's inUse."""
    writes: int = 0
    job_writes: int = 0
    """Job writes, each followed by a census of the live Jobs."""

    @property
    def in_use(self) -> bool | None:
        """The liveness ConfigMap's last inUse (``None`` before it exists)."""
        return self.liveness[-1][1] if self.liveness else None


class Observer:
    """Subscribe with :meth:`attach`; read :attr:`seen`; wait with :meth:`wait_for`."""

    def __init__(
        self,
        emu: Emulator,
        namespace: str,
        settings: Settings,
        timeline: Timeline,
        names: Mapping[str, str],
    ) -> None:
        self.emu = emu
        self.namespace = namespace
        self.settings = settings
        self.timeline = timeline
        self.names = names
        """elb-job-id -> who submitted it (filled in by the scenario before it submits)."""
        self.seen = Observations()
        self._changed = threading.Condition()
        self._detach: Callable[[], None] | None = None
        self.errors: list[BaseException] = []

    def attach(self) -> None:
        """Start observing (every write from now on)."""
        self._detach = self.emu.subscribe(self._on_write)

    def detach(self) -> None:
        """Stop observing."""
        if self._detach is not None:
            self._detach()
            self._detach = None

    def wait_for(self, predicate: Callable[[Observations], bool], timeout: float) -> bool:
        """Block until ``predicate(seen)`` holds (True) or ``timeout`` passes (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.seen), timeout)

    def name_of(self, job_id: str) -> str:
        """``<submitter> (…<last 8 of id>)``."""
        who = self.names.get(job_id, "unknown submitter")
        return f"{who} (…{short(job_id)})"

    # -- the subscriber (emulator thread, store locked: quick, and never raises) --------

    def _on_write(self, kind: str, resource: str, obj: dict[str, Any]) -> None:
        try:
            meta = obj.get("metadata") or {}
            if meta.get("namespace") != self.namespace:
                return
            self.seen.writes += 1
            if resource == "jobs":
                self._on_job(kind, obj)
            elif resource == "leases" and meta.get("name") == lease_name(self.namespace):
                self._on_lease(obj)
            elif resource == "events" and kind == "ADDED":
                self._on_event(obj)
            elif resource == "configmaps" and meta.get("name") == LIVENESS_CONFIGMAP:
                self._on_liveness(obj)
        except Exception as exc:  # reported in the summary; the write itself stands
            self.errors.append(exc)
        with self._changed:
            self._changed.notify_all()

    def _on_job(self, kind: str, job: dict[str, Any]) -> None:
        seen, now = self.seen, self.timeline.elapsed()
        seen.job_writes += 1
        meta = job["metadata"]
        labels = meta.get("labels") or {}
        app, job_id = str(labels.get(APP_LABEL) or ""), str(labels.get(JOB_ID_LABEL) or "")
        jobs = self.emu.list("jobs", self.namespace)
        counted = census(jobs, datetime.now(UTC), self.settings.finalizer_grace_seconds)
        if counted.count > seen.peak:
            seen.peak, seen.peak_ids = counted.count, counted.active_ids
        seen.active = counted.active_ids
        ceiling = self.settings.max_run_concurrency
        tally = f"{counted.count}/{ceiling} active"
        if kind == "ADDED":
            seen.jobs_created += 1
            seen.created.setdefault(meta["name"], now)
            for opened in counted.active_ids:
                if opened not in seen.opened:
                    seen.opened[opened] = now
                    holder = seen.lease_holder or "nobody"
                    self.timeline.emit(
                        "open",
                        f"search {self.name_of(opened)}: app={app} Job {meta['name']} admitted"
                        f" (Lease holder {_brief(holder)}) -> {tally}",
                    )
        elif kind == "MODIFIED" and is_terminal(job):
            status = job.get("status") or {}
            if app == FINALIZER_APP and status.get("succeeded") and job_id not in seen.finished:
                seen.finished[job_id] = now
                self.timeline.emit(
                    "done",
                    f"search {self.name_of(job_id)}: finalizer {meta['name']} succeeded -> {tally}",
                )
            elif app in COMPANION_APPS and not status.get("succeeded"):
                self.timeline.emit(
                    "failed",
                    f"search {self.name_of(job_id)}: app={app} Job {meta['name']} failed",
                )
        if kind == "DELETED" and app == FINALIZER_APP:
            seen.orphans_deleted.setdefault(meta["name"], now)
        if ORPHANED_SINCE_ANNOTATION in (meta.get("annotations") or {}):
            seen.orphans_flagged.setdefault(meta["name"], now)

    def _on_lease(self, lease: dict[str, Any]) -> None:
        view = LeaseView.from_dict(lease)
        if view.holder != self.seen.lease_holder:
            if view.holder:
                self.seen.lease_handovers += 1
            self.seen.lease_holder = view.holder

    def _on_event(self, event: dict[str, Any]) -> None:
        reason = str(event.get("reason") or "")
        message = str(event.get("message") or "")
        now = self.timeline.elapsed()
        involved = event.get("involvedObject") or {}
        if reason in RECLAIM_REASONS:
            holder = message.split("'")[1] if message.count("'") >= 2 else ""
            self.seen.reclaims.append(Reclaim(now, RECLAIM_REASONS[reason], holder, message))
            self.timeline.emit("reclaim", f"controller ({reason}): {message}")
        elif reason == ORPHAN_FLAGGED:
            self.seen.orphans_flagged.setdefault(str(involved.get("name")), now)
            self.timeline.emit("orphan", f"controller ({reason}): {message}")
        elif reason == ORPHAN_DELETED:
            self.seen.orphans_deleted.setdefault(str(involved.get("name")), now)
            self.timeline.emit("gc", f"controller ({reason}): {message}")

    def _on_liveness(self, configmap: dict[str, Any]) -> None:
        data = configmap.get("data") or {}
        in_use = data.get("inUse") == "true"
        if self.seen.in_use is not None and self.seen.in_use == in_use:
            return
        self.seen.liveness.append((self.timeline.elapsed(), in_use))
        if in_use:
            why = (
                f"activeSearches={data.get('activeSearches', '?')}, "
                f"leaseHolder={_brief(data.get('leaseHolder') or '') or '-'}"
            )
            self.timeline.emit("liveness", f"{LIVENESS_CONFIGMAP}: inUse=true ({why})")
        else:
            self.timeline.emit(
                "liveness",
                f"{LIVENESS_CONFIGMAP}: inUse=false (idleSince {data.get('idleSince', '?')})",
            )


def _brief(holder: str) -> str:
    """``dashboard-3f2a…``: enough of a holder identity to tell them apart."""
    return holder if len(holder) <= 20 else holder[:18] + "…"
