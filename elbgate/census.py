"""The census of active searches: one pure function shared by the webhook
(admission), the controller (liveness, orphans) and the CLI (``elb-gate census``),
so the three can never disagree on "3".

Rules (docs/design.md, "Census"):

* terminal Job: as the Job controller writes it (:mod:`elbgate.job_status`). For
  ElasticBLAST's one-pod Jobs: ``status.succeeded > 0``, or ``completionTime``
  set, or a ``Complete``/``Failed`` condition with status ``True``. A bare
  ``failed > 0`` is still active (the Job controller may retry), and so is a
  suspended Job (it resumes without passing a gate) and a Job whose outcome is
  decided while its pods are still terminating.
* a search (distinct ``elb-job-id``) is active if it has a non-terminal
  ``app=setup``/``app=submit``/``app=blast`` Job, or a non-terminal finalizer
  that is *live*: such a non-terminal companion exists, or it is younger than
  the finalizer grace, or its age is unknown.
* a non-terminal ``setup`` Job with no ``elb-job-id`` (warm-reuse
  ``import-queries``, cloud split) belongs to the Lease holder's submit in
  progress: it is no search of its own and holds no slot, but what it stages
  is staging (:attr:`Census.staging`) and it is unfinished work.
* any other non-terminal search Job with no ``elb-job-id`` counts as its own
  search (keyed ``<app>/<name>``): unknown work is never counted as no work.
* the databases each active search stages and uses, and each database being
  staged right now, by whom (:mod:`elbgate.databases`): the DB staging rule.
* a non-terminal finalizer that is not live holds no slot. It is *finishing*
  when its search had batch work (a terminal ``setup``/``submit``/``blast`` Job
  of its ``elb-job-id``, or the controller's ``elb-gate.io/batch-work-seen``
  record on the finalizer) — the
  batch is done and the finalizer is merging results: never garbage-collected,
  and still "in use" for auto-stop — and an *orphan* when its batch work never
  appeared (only orphans are garbage-collected).

  The first design called every non-live finalizer an orphan (docs/design.md,
  "Decisions that refine the first design", *Finishing is not orphaned*); taken
  literally, the controller would delete a finalizer still merging results once
  its last batch Job had been done for the delete grace, losing the search's
  output. Telling
  the two apart needs the terminal Jobs: callers that LIST with
  ``status.successful=0`` (the webhook) see fewer finishing finalizers, which
  changes nothing they decide, since neither kind holds a slot.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elbgate.databases import job_databases
from elbgate.durations import format_duration
from elbgate.job_status import is_suspended, is_terminal, terminating_pods
from elbgate.lease import Unparseable, parse_microtime
from elbgate.names import (
    APP_LABEL,
    BATCH_WORK_EVIDENCE_APPS,
    BATCH_WORK_SEEN_ANNOTATION,
    FINALIZER_APP,
    JOB_ID_LABEL,
    ORPHANED_SINCE_ANNOTATION,
    SEARCH_APPS,
    SETUP_APP,
)

__all__ = [
    "ActiveSearch",
    "Census",
    "CensusMemo",
    "JobFacts",
    "JobRef",
    "Staging",
    "census",
    "census_of_refs",
    "is_terminal",
    "job_facts",
]


@dataclass(frozen=True, slots=True)
class JobRef:
    """The few fields of a Job the census and its callers need."""

    name: str
    namespace: str
    app: str
    job_id: str
    """``elb-job-id`` label, ``""`` when absent."""
    uid: str
    resource_version: str
    created: datetime | None
    """``None`` when the creation time is missing or unparseable (age unknown)."""
    orphaned_since: str
    """The controller's ``elb-gate.io/orphaned-since`` annotation, ``""`` if absent."""
    stages: tuple[str, ...] = ()
    """Databases this Job stages (a ``setup`` Job's ``ELB_DB``; see :mod:`elbgate.databases`)."""
    uses: tuple[str, ...] = ()
    """Databases this Job touches, the staged ones included (a ``blast`` Job's ``db``)."""
    suspended: bool = False
    """Suspended: it runs no pod now, but resumes without passing a gate, so it counts."""
    terminating: int = 0
    """Pods of this Job still terminating (``status.terminating``)."""
    batch_work_seen: str = ""
    """The controller's ``elb-gate.io/batch-work-seen`` annotation, ``""`` if absent: the
    durable record that this finalizer's search had batch work (finishing, never an orphan)."""

    @classmethod
    def from_dict(cls, job: Mapping[str, Any]) -> JobRef:
        meta = job.get("metadata") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        created = parse_microtime(meta.get("creationTimestamp"))
        dbs = job_databases(job)
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            app=str(labels.get(APP_LABEL) or ""),
            job_id=str(labels.get(JOB_ID_LABEL) or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            created=None if isinstance(created, Unparseable) else created,
            orphaned_since=str(annotations.get(ORPHANED_SINCE_ANNOTATION) or ""),
            stages=dbs.stages,
            uses=dbs.uses,
            suspended=is_suspended(job),
            terminating=terminating_pods(job),
            batch_work_seen=str(annotations.get(BATCH_WORK_SEEN_ANNOTATION) or ""),
        )

    def age_seconds(self, now: datetime) -> float | None:
        return None if self.created is None else (now - self.created).total_seconds()


@dataclass(frozen=True, slots=True)
class ActiveSearch:
    """One search that holds a slot, with why it counts."""

    key: str
    """Its ``elb-job-id``, or ``<app>/<name>`` for an unlabelled Job."""
    jobs: tuple[JobRef, ...]
    reason: str
    used_before: tuple[str, ...] = ()
    """Databases its finished setup Jobs staged (a cold search's completed init
    Jobs): the search still reads them until it ends. Finished batch Jobs add
    nothing: a search that still searches a database has a live Job naming it."""

    @property
    def stages(self) -> tuple[str, ...]:
        """Databases this search is staging now (its unfinished setup Jobs)."""
        return _union(r.stages for r in self.jobs)

    @property
    def uses(self) -> tuple[str, ...]:
        """Databases this search stages or searches: those its unfinished Jobs name,
        and those its finished Jobs named (a cold search whose setup Jobs completed
        reads the staged database until it ends, even before its batch Jobs exist);
        ``()`` when none names one (seen only through submit/finalizer Jobs)."""
        return _union([self.used_before, *(r.uses for r in self.jobs)])


@dataclass(frozen=True, slots=True)
class Staging:
    """One database being staged now, and by whom."""

    db: str
    key: str
    """The staging search's ``elb-job-id``, or ``setup/<name>`` for a setup Job
    without one (the Lease holder's submit in progress)."""
    jobs: tuple[JobRef, ...]


def _union(groups: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    out: list[str] = []
    for group in groups:
        out.extend(db for db in group if db not in out)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Census:
    """What the namespace's search Jobs say, at one instant."""

    active: tuple[ActiveSearch, ...]
    """Sorted by key."""
    orphans: tuple[JobRef, ...]
    """Non-live finalizers whose batch work never appeared; they hold no slot."""
    finishing: tuple[JobRef, ...] = field(default=())
    """Non-live finalizers whose batch work is done (merging results); no slot, never GC'd."""
    unfinished: tuple[JobRef, ...] = field(default=())
    """Every non-terminal search Job seen (liveness, `elb-gate census`)."""
    staging: tuple[Staging, ...] = field(default=())
    """Databases being staged now, sorted by database then stager."""

    @property
    def active_ids(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.active)

    @property
    def count(self) -> int:
        return len(self.active)

    def is_active(self, job_id: str) -> bool:
        return any(s.key == job_id for s in self.active)

    def search(self, key: str) -> ActiveSearch | None:
        """The active search keyed ``key``, if any."""
        return next((s for s in self.active if s.key == key), None)


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the census reads of one stored version of a search Job."""

    app: str
    job_id: str
    """``elb-job-id`` label, ``""`` when absent."""
    setup_uses: tuple[str, ...]
    """A terminal ``setup`` Job's databases (what its search had staged)."""
    ref: JobRef | None
    """The Job as an unfinished one counts; ``None``: it is terminal."""


def job_facts(job: Mapping[str, Any]) -> JobFacts | None:
    """The census's facts of ``job``; ``None`` for a Job of no search app."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    app = labels.get(APP_LABEL)
    if app not in SEARCH_APPS:
        return None
    job_id = str(labels.get(JOB_ID_LABEL) or "")
    if not is_terminal(job):
        return JobFacts(str(app), job_id, (), JobRef.from_dict(job))
    uses = job_databases(job).uses if app == SETUP_APP and job_id else ()
    return JobFacts(str(app), job_id, uses, None)


class CensusMemo:
    """:func:`job_facts` of the Job versions read lately, so that a census over Jobs
    already read (a watch cache, the same LIST again) reads each version once. Keyed by
    ``(uid, resourceVersion)``: the API server stores a new resourceVersion with every
    change, so one key never names two contents. At most ``size`` versions, the least
    lately read dropped first; a Job without both is read every time."""

    def __init__(self, size: int = 16384) -> None:
        self.size = size
        self._facts: dict[tuple[str, str], JobFacts | None] = {}

    def __len__(self) -> int:
        return len(self._facts)

    def facts(self, job: Mapping[str, Any]) -> JobFacts | None:
        meta = job.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return job_facts(job)
        key = (str(uid), str(version))
        facts = self._facts.pop(key) if key in self._facts else job_facts(job)
        self._facts[key] = facts  # now the most lately read
        if len(self._facts) > self.size:
            del self._facts[next(iter(self._facts))]
        return facts


def census(
    jobs: Iterable[Mapping[str, Any]],
    now: datetime,
    finalizer_grace_seconds: float,
    batch_work_ids: Collection[str] = frozenset(),
    *,
    reserved: Iterable[JobRef] = (),
    memo: CensusMemo | None = None,
) -> Census:
    """Count the active searches among ``jobs`` (raw Job dicts; terminal and
    non-search Jobs may be included). ``batch_work_ids`` names searches known to
    have had batch work whose Jobs are not in ``jobs``; ``reserved`` are admitted
    Jobs not among ``jobs`` yet (:mod:`elbgate.reservations`), counted as unfinished;
    ``memo``: read each Job version once across calls."""
    read = memo.facts if memo is not None else job_facts
    had_batch_work = set(batch_work_ids)
    used_before: dict[str, tuple[str, ...]] = {}
    unfinished: list[JobRef] = []
    for job in jobs:
        facts = read(job)
        if facts is None:
            continue
        if facts.ref is not None:
            unfinished.append(facts.ref)
        elif facts.job_id:
            if facts.app in BATCH_WORK_EVIDENCE_APPS:
                had_batch_work.add(facts.job_id)
            if facts.setup_uses:
                key = facts.job_id
                used_before[key] = _union([used_before.get(key, ()), facts.setup_uses])
    unfinished.extend(reserved)
    return census_of_refs(
        unfinished, now, finalizer_grace_seconds, had_batch_work, used_before=used_before
    )


def census_of_refs(
    unfinished: Iterable[JobRef],
    now: datetime,
    finalizer_grace_seconds: float,
    batch_work_ids: Collection[str] = frozenset(),
    *,
    used_before: Mapping[str, tuple[str, ...]] | None = None,
) -> Census:
    """:func:`census` for callers that already hold the unfinished Jobs as
    :class:`JobRef` (the controller's cache) and the ids of searches whose batch
    Jobs finished. Refs of other apps are ignored."""
    finalizers: dict[str, list[JobRef]] = {}
    companions: dict[str, list[JobRef]] = {}
    kept: list[JobRef] = []
    stagers: dict[tuple[str, str], list[JobRef]] = {}
    for ref in unfinished:
        if ref.app not in SEARCH_APPS:
            continue
        kept.append(ref)
        for db in ref.stages:
            stager = ref.job_id or f"{ref.app}/{ref.name}"
            stagers.setdefault((db, stager), []).append(ref)
        if ref.app == SETUP_APP and not ref.job_id:
            continue  # part of the Lease holder's submit in progress, not a search
        key = ref.job_id or f"{ref.app}/{ref.name}"
        bucket = finalizers if ref.app == FINALIZER_APP else companions
        bucket.setdefault(key, []).append(ref)

    active: dict[str, ActiveSearch] = {}
    for key, refs in companions.items():
        refs_all = tuple(refs) + tuple(finalizers.get(key, ()))
        names = ", ".join(sorted(f"{r.app}/{r.name}" for r in refs))
        active[key] = ActiveSearch(
            key, refs_all, f"unfinished work: {names}", (used_before or {}).get(key, ())
        )

    orphans: list[JobRef] = []
    finishing: list[JobRef] = []
    for key, refs in finalizers.items():
        if key in active:
            continue
        live = [r for r in refs if _young_or_unknown(r, now, finalizer_grace_seconds)]
        if live:
            age = live[0].age_seconds(now)
            grace = int(finalizer_grace_seconds)
            why = (
                "age unknown"
                if age is None
                else f"{format_duration(age)} old < {format_duration(grace)} grace"
            )
            active[key] = ActiveSearch(key, tuple(refs), f"finalizer {live[0].name} live ({why})")
        for r in refs:
            if r not in live:
                # The durable record on the finalizer wins over what is still listed:
                # batch Jobs are TTL-deleted while a finalizer may still be merging.
                had = key in batch_work_ids or bool(r.batch_work_seen)
                (finishing if had else orphans).append(r)

    return Census(
        active=tuple(active[k] for k in sorted(active)),
        orphans=tuple(sorted(orphans, key=lambda r: r.name)),
        finishing=tuple(sorted(finishing, key=lambda r: r.name)),
        unfinished=tuple(kept),
        staging=tuple(
            Staging(db, stager, tuple(refs)) for (db, stager), refs in sorted(stagers.items())
        ),
    )


def _young_or_unknown(ref: JobRef, now: datetime, grace: float) -> bool:
    age = ref.age_seconds(now)
    return age is None or age < grace
