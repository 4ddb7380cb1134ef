"""Gate A + Gate B on search Jobs (webhook ``search-admission.elb-gate.io``). Pure; no I/O.

DESIGN.md "Gate B — search admission":

* a Job labelled ``app`` in (finalizer, submit, blast) whose ``elb-job-id`` is
  not yet active opens a search: Gate A (the requester holds the Lease) and
  Gate B (active < ceiling);
* a Job of an already-active ``elb-job-id`` passes without Gate B and without
  Gate A — except the finalizer, which always needs Gate A;
* a finalizer without a non-empty ``elb-job-id`` is refused (422);
* UPDATE is judged only when it adds a gated ``app`` or changes ``elb-job-id``;
  DELETE is never gated. Neither costs an API call.

The handler asks :func:`reads_needed` what to read, reads it, takes the census
with :func:`survey`, and calls :func:`decide` with what it saw.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elbgate.census import Census, census
from elbgate.identities import SubmitterIdentities
from elbgate.lease import LeaseView, holder_source, is_expired
from elbgate.names import APP_LABEL, FINALIZER_APP, JOB_ID_LABEL, SEARCH_APPS, lease_name
from elbgate.settings import Settings
from webhook.decision import Decision, admit, refuse
from webhook.requester import Requester, holds
from webhook.review import AdmissionRequest
from webhook.wording import IDENTITIES_VAR, expiry_phrase, holder_phrase


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    labels = ((obj or {}).get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A CREATE/UPDATE/DELETE of a Job, as search admission reads it."""

    operation: str
    namespace: str
    name: str
    app: str
    job_id: str
    old_app: str | None
    """``None`` when there is no oldObject (CREATE, or an UPDATE that lacks it)."""
    old_job_id: str
    requester: Requester

    @classmethod
    def from_admission(cls, req: AdmissionRequest) -> JobRequest:
        labels, old_labels = _labels(req.obj), _labels(req.old_object)
        meta = (req.obj or {}).get("metadata") or {}
        name = req.name or str(meta.get("name") or meta.get("generateName") or "")
        return cls(
            operation=req.operation,
            namespace=req.namespace,
            name=name,
            app=str(labels.get(APP_LABEL) or ""),
            job_id=str(labels.get(JOB_ID_LABEL) or ""),
            old_app=str(old_labels.get(APP_LABEL) or "") if req.old_object is not None else None,
            old_job_id=str(old_labels.get(JOB_ID_LABEL) or ""),
            requester=Requester.from_user_info(req.user),
        )

    @property
    def ref(self) -> str:
        """``Job ns/name (app=…, elb-job-id=…)`` as denials name it."""
        return f"Job {self.namespace}/{self.name} (app={self.app}, elb-job-id={self.job_id or '-'})"

    @property
    def lease_ref(self) -> str:
        return f"{self.namespace}/{lease_name(self.namespace)}"


class Reads(enum.Enum):
    """What the handler must read before :func:`decide` can answer."""

    NONE = "none"
    """Not gated, or refused on the request alone: no API call."""
    JOBS = "jobs"
    """The census LIST; the Lease only if :func:`lease_needed` says so afterwards."""
    JOBS_AND_LEASE = "jobs_and_lease"
    """Both, concurrently (a finalizer always needs Gate A)."""


class _NotRead:
    def __repr__(self) -> str:
        return "NOT_READ"


NOT_READ: Any = _NotRead()
"""Marks an observation the handler did not make (distinct from a Lease that is absent)."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What the handler read: the census of the search Jobs (see :func:`survey`) and
    the submit Lease (``None`` = it does not exist, :data:`NOT_READ` = not asked for)."""

    census: Census | None = None
    lease: Mapping[str, Any] | None = NOT_READ


def _judged(job: JobRequest) -> bool:
    """Does this request open or join a search (as opposed to a Job controller write)?"""
    if job.operation not in ("CREATE", "UPDATE") or job.app not in SEARCH_APPS:
        return False
    if job.operation == "UPDATE" and job.old_app is not None:
        return job.app != job.old_app or job.job_id != job.old_job_id
    return True


def _missing_job_id(job: JobRequest) -> bool:
    return job.app == FINALIZER_APP and not job.job_id.strip()


def reads_needed(job: JobRequest) -> Reads:
    """What to read for ``job``; :data:`Reads.NONE` costs no API call."""
    if not _judged(job) or _missing_job_id(job):
        return Reads.NONE
    return Reads.JOBS_AND_LEASE if job.app == FINALIZER_APP else Reads.JOBS


def survey(
    job: JobRequest, jobs: Sequence[Mapping[str, Any]], settings: Settings, now: datetime
) -> Census:
    """The census of ``jobs`` (the LIST) as it bears on ``job``."""
    # An UPDATE's own Job is already stored under its old labels: it must not
    # count against the search it is being moved into or out of.
    if job.operation == "UPDATE":
        jobs = [j for j in jobs if ((j.get("metadata") or {}).get("name")) != job.name]
    return census(jobs, now, settings.finalizer_grace_seconds)


def _joins_active(job: JobRequest, seen: Census) -> bool:
    return bool(job.job_id) and seen.is_active(job.job_id)


def lease_needed(job: JobRequest, seen: Census) -> bool:
    """After the census LIST: does ``job`` still need Gate A (and so the Lease)?"""
    return job.app == FINALIZER_APP or not _joins_active(job, seen)


def decide(
    job: JobRequest,
    observed: Observed,
    settings: Settings,
    now: datetime,
    identities: SubmitterIdentities | None = None,
) -> Decision:
    """Admit or refuse ``job`` given what was observed."""
    if not _judged(job):
        return admit("not_gated")
    if _missing_job_id(job):
        return refuse(
            422,
            "missing_job_id",
            f"Search admission: {job.ref} has no elb-job-id label. A finalizer must carry the "
            "elb-job-id of its search: set metadata.labels.elb-job-id (elastic-blast submit does).",
        )
    seen = observed.census
    if seen is None:
        raise ValueError("decide() needs the census for a gated Job (see reads_needed)")
    joins = _joins_active(job, seen)
    facts: dict[str, Any] = {
        "job_id": job.job_id,
        "active": list(seen.active_ids),
        "ceiling": settings.max_run_concurrency,
    }
    if job.app == FINALIZER_APP or not joins:
        if observed.lease is NOT_READ:
            raise ValueError("decide() needs the Lease for Gate A (see lease_needed)")
        gate_a = _gate_a(job, observed.lease, settings, now, identities or SubmitterIdentities())
        if gate_a is not None:
            return gate_a
    if joins:
        return admit("joins_active", **facts)
    if seen.count >= settings.max_run_concurrency:
        ids = ", ".join(seen.active_ids)
        return refuse(
            429,
            "ceiling",
            f"Gate B: {seen.count}/{settings.max_run_concurrency} searches already active in "
            f"namespace {job.namespace} ({ids}), so {job.ref} cannot open another. Retry when one "
            f"of {ids} completes.",
            **facts,
        )
    return admit("ok", **facts)


def _gate_a(
    job: JobRequest,
    lease_obj: Mapping[str, Any] | None,
    settings: Settings,
    now: datetime,
    identities: SubmitterIdentities,
) -> Decision | None:
    """``None`` when the requester holds the Lease in force, else the 403 denial."""
    user = job.requester.username
    acquire = f"acquire Lease {job.lease_ref} before running elastic-blast submit"
    if lease_obj is None:
        return refuse(
            403,
            "no_lease",
            f"Gate A: Lease {job.lease_ref} does not exist, so user {user} does not hold it; "
            f"{job.ref} refused. Fix: {acquire}.",
        )
    lease = LeaseView.from_dict(lease_obj)
    if not lease.held:
        return refuse(
            403,
            "no_lease",
            f"Gate A: Lease {job.lease_ref} is not held by anyone, so user {user} does not hold "
            f"it; {job.ref} refused. Fix: {acquire}.",
        )
    expiry = expiry_phrase(lease, settings, now)
    if is_expired(lease, now, settings.clock_skew_seconds, settings.lease_ttl_seconds):
        return refuse(
            403,
            "lease_expired",
            f"Gate A: Lease {job.lease_ref} held by {holder_phrase(lease)} {expiry} on elb-gate's "
            f"clock; {job.ref} refused. Fix: renew or re-acquire the Lease before creating Jobs.",
            holder=lease.holder,
        )
    if holds(lease, job.requester, identities).matched:
        return None
    return refuse(
        403,
        "not_holder",
        f"Gate A: user {user} does not hold Lease {job.lease_ref}: it is held by "
        f"{holder_phrase(lease)} and {expiry}; {job.ref} refused. Fix: "
        f"{acquire}, or {_mapping_hint(lease, user, identities)}.",
        holder=lease.holder,
        holder_user=lease.holder_user,
    )


def _mapping_hint(lease: LeaseView, user: str, identities: SubmitterIdentities) -> str:
    """How to tell elb-gate that ``user`` and the holder are one submit path."""
    sub = identities.for_holder(lease.holder)
    if sub is not None:
        return (
            f"if {user} runs submit path `{sub.name}`, map user {user} to submitter "
            f"`{sub.name}` in {IDENTITIES_VAR}"
        )
    other = lease.holder_user or "the holder's user"
    source = holder_source(lease.holder)
    prefix = f"holderPrefix {source}-" if source else f"a holderPrefix of {lease.holder}"
    return (
        f"if {user} and {other} are one submit path, map both to one submitter "
        f"({prefix}) in {IDENTITIES_VAR}"
    )
