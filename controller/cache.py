"""The lean per-namespace cache the watches feed and the reconciler reads.

Only the few fields the planners need are kept, as the shared library's own frozen views
(:class:`elbgate.census.JobRef`, :class:`elbgate.lease.LeaseView`), never whole objects:
memory is benchmarked. The Jobs watch sees only live Jobs (``status.successful=0``: the
unfinished and the failed; a namespace's history of succeeded Jobs is never read whole),
so a Job that succeeds *leaves* the watch with a DELETED event (see
:meth:`Cache._leave_job`). A finished Job is dropped at once
unless it still carries the orphaned-since mark, which must be removed; of a finished
``submit``/``blast``/``setup`` Job only its name, app and ``elb-job-id`` are kept, because
a finalizer whose batch work is done is *finishing* (merging results), not an orphan (see
:mod:`elbgate.census`). Batch work that finished out of the watch's sight is looked up
once per finalizer (:mod:`controller.history`) and kept in :attr:`NamespaceCache.looked_up`
until the next relist. That memory is only a bridge: the batch Jobs are TTL-deleted and a
restart forgets it, so the reconciler records the sighting on the finalizer itself
(``elb-gate.io/batch-work-seen``).

A namespace is *synced* only while every one of its watched kinds has completed its
initial LIST and its watch is up; the reconciler never plans on anything less.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from elbgate.census import JobRef, is_terminal
from elbgate.lease import LeaseView
from elbgate.names import BATCH_WORK_EVIDENCE_APPS, FINALIZER_APP
from elbgate.reservations import batch_work_of, split_searches_of


class Kind(StrEnum):
    """What a watch feeds into the cache. Not an API resource (those are
    :mod:`elbgate.kube.api`'s ``JOBS``, ``LEASES``…): two kinds read Jobs and two read
    ConfigMaps, each through its own watch."""

    JOBS = "jobs"
    """The live search Jobs (``status.successful=0``)."""
    LIVENESS_JOBS = "liveness-jobs"
    """Jobs of the apps only liveness reads (the dashboard's warm-up, prepare-db, oracle),
    watched whole: an Indexed Job with some indexes done has ``succeeded`` > 0 while it
    still runs, so the live Jobs watch (``status.successful=0``) would lose it."""
    LEASES = "leases"
    CONFIGMAPS = "configmaps"
    """The liveness ConfigMap."""
    ADMISSIONS = "admissions"
    """The webhook's admission record (ConfigMap ``elb-gate-admissions``): its batch-work
    evidence (:func:`elbgate.reservations.batch_work_of`), which outlives the batch Jobs
    and any time the controller was not watching."""


@dataclass(frozen=True, slots=True)
class ConfigMapRecord:
    """The liveness ConfigMap as last seen: its resourceVersion and ``data``."""

    name: str
    resource_version: str
    data: Mapping[str, str]

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> ConfigMapRecord:
        meta = obj.get("metadata") or {}
        data = obj.get("data") or {}
        return cls(
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            data={str(k): str(v) for k, v in data.items()} if isinstance(data, Mapping) else {},
        )


@dataclass(slots=True)
class NamespaceCache:
    """What one namespace looks like, as far as the controller cares."""

    unfinished: dict[str, JobRef] = field(default_factory=dict)
    liveness_jobs: dict[str, JobRef] = field(default_factory=dict)
    """Unfinished Jobs of the liveness-only apps (:data:`LIVENESS_JOBS`)."""
    """Non-terminal watched Jobs, by name."""
    finished_marked: dict[str, JobRef] = field(default_factory=dict)
    """Terminal Jobs that still carry ``elb-gate.io/orphaned-since`` (to be un-marked)."""
    finished_batch: dict[str, str] = field(default_factory=dict)
    """Terminal batch-work Jobs (:data:`~elbgate.names.BATCH_WORK_EVIDENCE_APPS`): name →
    ``elb-job-id`` (their search had batch work)."""
    finished_batch_apps: dict[str, str] = field(default_factory=dict)
    """The same Jobs: name → ``app`` (to name what was seen)."""
    lease: LeaseView | None = None
    liveness: ConfigMapRecord | None = None
    recorded_batch_work: dict[str, str] = field(default_factory=dict)
    """From the admission record: ``elb-job-id`` → ``<app>/<name>`` of its first batch work."""
    recorded_splits: frozenset[str] = frozenset()
    """From the admission record: the searches opened as split shards."""
    looked_up: dict[str, str] = field(default_factory=dict)
    """Searches whose batch work was looked up in the history (:mod:`controller.history`):
    ``elb-job-id`` → ``<app>/<name>`` of one batch-work Job, ``""`` when there was none.
    Valid until the Jobs watch relists: every batch Job created after a lookup is seen
    live, so a lookup that found nothing stays true while the watch lasts."""
    jobs_epoch: int = 0
    """How many times the Jobs watch has relisted (a lookup made before a relist is not
    kept after it)."""
    synced: set[str] = field(default_factory=set)
    """Kinds whose LIST completed and whose watch has not failed since."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable copy of one namespace's cache, handed to the pure planners."""

    namespace: str
    lease: LeaseView | None
    unfinished: tuple[JobRef, ...]
    finished_marked: tuple[JobRef, ...]
    liveness: ConfigMapRecord | None
    batch_work_ids: frozenset[str] = frozenset()
    """Searches whose batch Jobs have finished, or that the admission record says had
    batch work (their finalizers are finishing, not orphans)."""
    batch_work: Mapping[str, str] = field(default_factory=dict)
    """Every search with a batch-work Job in the cache, finished or not: ``elb-job-id`` →
    ``<app>/<name>`` of one such Job (what the finalizer's record names)."""
    split_ids: frozenset[str] = frozenset()
    """Searches the admission record says were opened as split shards."""


def _recorded(obj: Mapping[str, Any]) -> dict[str, str]:
    """``elb-job-id`` → ``<app>/<name>`` from the admission record's evidence."""
    return {
        job_id: value.split(" ", 1)[-1] for job_id, value in batch_work_of(obj).items() if value
    }


class Cache:
    """Per-namespace records for Jobs, the submit Lease and the liveness ConfigMap.

    Not thread-safe: it lives on the controller's event loop. ``on_change(namespace)``
    is called after every change a reconcile should look at.
    """

    def __init__(
        self,
        namespaces: Iterable[str],
        on_change: Callable[[str], None] | None = None,
        *,
        liveness_jobs_watched: bool = False,
    ) -> None:
        """``liveness_jobs_watched``: a :data:`LIVENESS_JOBS` watch feeds this cache (there
        is none when every liveness app is a search app); until it lists, nothing syncs."""
        self._ns: dict[str, NamespaceCache] = {ns: NamespaceCache() for ns in namespaces}
        self._on_change = on_change or (lambda _ns: None)
        if not liveness_jobs_watched:
            for entry in self._ns.values():
                entry.synced.add(Kind.LIVENESS_JOBS)

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(self._ns)

    # -- feeding (the informers) ---------------------------------------------

    def replace(self, kind: str, namespace: str, items: Iterable[Mapping[str, Any]]) -> None:
        """Install the result of a LIST and mark ``kind`` synced in ``namespace``."""
        entry = self._ns[namespace]
        if kind == Kind.JOBS:
            entry.unfinished.clear()
            entry.finished_marked.clear()
            entry.finished_batch.clear()
            entry.finished_batch_apps.clear()
            entry.looked_up.clear()
            entry.jobs_epoch += 1
            for obj in items:
                self._put_job(entry, obj)
        elif kind == Kind.LIVENESS_JOBS:
            entry.liveness_jobs.clear()
            for obj in items:
                self._put_liveness_job(entry, obj)
        elif kind == Kind.LEASES:
            entry.lease = None
            for obj in items:
                entry.lease = LeaseView.from_dict(obj)
        elif kind == Kind.CONFIGMAPS:
            entry.liveness = None
            for obj in items:
                entry.liveness = ConfigMapRecord.from_dict(obj)
        elif kind == Kind.ADMISSIONS:
            entry.recorded_batch_work, entry.recorded_splits = {}, frozenset()
            for obj in items:
                entry.recorded_batch_work = _recorded(obj)
                entry.recorded_splits = frozenset(split_searches_of(obj))
        else:
            raise ValueError(f"unknown kind {kind!r}")
        entry.synced.add(kind)
        self._on_change(namespace)

    def apply(self, kind: str, namespace: str, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event (``ADDED``/``MODIFIED``/``DELETED``): the hot path."""
        entry = self._ns[namespace]
        deleted = event_type == "DELETED"
        if kind == Kind.JOBS:
            if deleted:
                self._leave_job(entry, obj)
            else:
                self._put_job(entry, obj)
        elif kind == Kind.LIVENESS_JOBS:
            if deleted:
                entry.liveness_jobs.pop(JobRef.from_dict(obj).name, None)
            else:
                self._put_liveness_job(entry, obj)
        elif kind == Kind.LEASES:
            entry.lease = None if deleted else LeaseView.from_dict(obj)
        elif kind == Kind.CONFIGMAPS:
            entry.liveness = None if deleted else ConfigMapRecord.from_dict(obj)
        elif kind == Kind.ADMISSIONS:
            entry.recorded_batch_work = {} if deleted else _recorded(obj)
            entry.recorded_splits = frozenset() if deleted else frozenset(split_searches_of(obj))
        else:
            raise ValueError(f"unknown kind {kind!r}")
        self._on_change(namespace)

    @staticmethod
    def _leave_job(entry: NamespaceCache, obj: Mapping[str, Any]) -> None:
        """A Job left the live Jobs watch: deleted, or succeeded (``status.successful=0``
        no longer selects it). The event carries the Job as it was before (the API
        server's watch sends the previous object), so the two cannot be told apart here:
        a batch-work Job is kept as evidence that its search had batch work (it existed,
        either way), and a Job that carried the orphan mark is kept to be un-marked (the
        CAS of the un-mark finds out; a Job really deleted answers 404 and is forgotten)."""
        ref = JobRef.from_dict(obj)
        entry.unfinished.pop(ref.name, None)
        entry.finished_marked.pop(ref.name, None)
        if ref.app in BATCH_WORK_EVIDENCE_APPS and ref.job_id:
            entry.finished_batch[ref.name] = ref.job_id
            entry.finished_batch_apps[ref.name] = ref.app
        if ref.orphaned_since:
            entry.finished_marked[ref.name] = ref

    @staticmethod
    def _put_liveness_job(entry: NamespaceCache, obj: Mapping[str, Any]) -> None:
        ref = JobRef.from_dict(obj)
        if is_terminal(obj):
            entry.liveness_jobs.pop(ref.name, None)
        else:
            entry.liveness_jobs[ref.name] = ref

    @staticmethod
    def _put_job(entry: NamespaceCache, obj: Mapping[str, Any]) -> None:
        ref = JobRef.from_dict(obj)
        if is_terminal(obj):
            entry.unfinished.pop(ref.name, None)
            if ref.app in BATCH_WORK_EVIDENCE_APPS and ref.job_id:
                entry.finished_batch[ref.name] = ref.job_id
                entry.finished_batch_apps[ref.name] = ref.app
            if ref.orphaned_since:
                entry.finished_marked[ref.name] = ref
            else:
                entry.finished_marked.pop(ref.name, None)
        else:
            entry.finished_marked.pop(ref.name, None)
            entry.unfinished[ref.name] = ref

    def write_through(
        self, kind: str, namespace: str, expected_rv: str, obj: Mapping[str, Any] | None
    ) -> None:
        """Record the result of our own write (``None``: deleted) — but only if the cache
        still holds the version we wrote against. If the watch already delivered that
        write, or anything newer, the cache is at least as fresh and is left alone."""
        entry = self._ns[namespace]
        name = str(((obj or {}).get("metadata") or {}).get("name") or "")
        current: Any
        if kind == Kind.JOBS:
            current = entry.unfinished.get(name) or entry.finished_marked.get(name)
        elif kind == Kind.LEASES:
            current = entry.lease
        else:
            current = entry.liveness
        current_rv = current.resource_version if current is not None else ""
        if current_rv != expected_rv:
            return
        if obj is not None:
            self.apply(kind, namespace, "MODIFIED", obj)

    def forget_job(self, namespace: str, name: str, expected_rv: str) -> None:
        """Drop a Job we just deleted, if the cache still holds the version we deleted."""
        entry = self._ns[namespace]
        ref = entry.unfinished.get(name) or entry.finished_marked.get(name)
        if ref is not None and ref.resource_version == expected_rv:
            entry.unfinished.pop(name, None)
            entry.finished_marked.pop(name, None)
            self._on_change(namespace)

    def forget_finished(self, namespace: str, name: str) -> None:
        """Drop a finished Job's stale ref (it is out of the live watch)."""
        self._ns[namespace].finished_marked.pop(name, None)

    def lookups_wanted(self, namespace: str) -> list[str]:
        """``elb-job-id`` of each live finalizer whose batch work nothing in view shows
        (no batch-work Job watched, no admission record, no record on the finalizer) and
        that was not looked up since the last relist."""
        entry = self._ns[namespace]
        known = (
            set(entry.finished_batch.values())
            | set(entry.recorded_batch_work)
            | set(entry.looked_up)
            | {
                r.job_id
                for r in entry.unfinished.values()
                if r.app in BATCH_WORK_EVIDENCE_APPS and r.job_id
            }
        )
        return sorted(
            {
                r.job_id
                for r in entry.unfinished.values()
                if r.app == FINALIZER_APP
                and r.job_id
                and not r.batch_work_seen
                and r.job_id not in known
            }
        )

    def jobs_epoch(self, namespace: str) -> int:
        return self._ns[namespace].jobs_epoch

    def looked_up(self, namespace: str, job_id: str, seen: str) -> None:
        """The history's answer for ``job_id``: ``<app>/<name>`` of a batch-work Job, or
        ``""`` when it holds none."""
        self._ns[namespace].looked_up[job_id] = seen
        if seen:
            self._on_change(namespace)

    def mark_unsynced(self, kind: str, namespace: str) -> None:
        """The watch of ``kind`` failed: stop trusting ``namespace`` until it relists."""
        self._ns[namespace].synced.discard(kind)

    # -- reading (the reconciler) --------------------------------------------

    def synced(self, namespace: str) -> bool:
        return self._ns[namespace].synced.issuperset(Kind)

    def all_synced(self) -> bool:
        return all(self.synced(ns) for ns in self._ns)

    def snapshot(self, namespace: str) -> Snapshot:
        entry = self._ns[namespace]
        seen: dict[str, str] = {}
        for name, job_id in sorted(entry.finished_batch.items()):
            seen.setdefault(job_id, f"{entry.finished_batch_apps.get(name, '')}/{name}")
        for job_id, job in sorted(entry.recorded_batch_work.items()):
            seen.setdefault(job_id, job)
        found = {job_id: job for job_id, job in entry.looked_up.items() if job}
        for job_id, job in sorted(found.items()):
            seen.setdefault(job_id, job)
        for ref in sorted(entry.unfinished.values(), key=lambda r: r.name):
            if ref.app in BATCH_WORK_EVIDENCE_APPS and ref.job_id:
                seen[ref.job_id] = f"{ref.app}/{ref.name}"  # a running Job names it best
        return Snapshot(
            namespace=namespace,
            lease=entry.lease,
            unfinished=tuple(entry.unfinished.values())
            + tuple(r for n, r in entry.liveness_jobs.items() if n not in entry.unfinished),
            finished_marked=tuple(entry.finished_marked.values()),
            liveness=entry.liveness,
            batch_work_ids=frozenset(entry.finished_batch.values())
            | frozenset(entry.recorded_batch_work)
            | frozenset(found),
            batch_work=seen,
            split_ids=entry.recorded_splits,
        )

    def job_count(self) -> int:
        return sum(
            len(e.unfinished) + len(e.finished_marked) + len(e.liveness_jobs)
            for e in self._ns.values()
        )
