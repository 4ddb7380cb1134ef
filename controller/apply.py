"""observe → plan → **apply**: the writes, each a CAS on the version the plan saw.

* a 409 means someone else changed the object: re-observe (the watch brings the new
  version; the namespace is queued again), never retry blindly or overwrite;
* a 404 means it is already gone: nothing to do;
* nothing is written unless this replica may act (leader, inside its renew deadline);
* an Event is recorded only after the write it describes succeeded, so a repeated plan
  (cache not yet caught up) never duplicates Events; a failed Event is logged, not fatal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import Any

from controller import events
from controller.actions import (
    Action,
    DeleteOrphan,
    MarkOrphan,
    RecordBatchWork,
    ReleaseLease,
    UnmarkOrphan,
    WriteLiveness,
)
from controller.batch_work import record_value
from controller.cache import Cache, Kind
from controller.metrics import ControllerMetrics
from elbgate.census import JobRef
from elbgate.kube.api import (
    CONFIGMAPS,
    EVENTS,
    JOBS,
    LEASES,
    ApiError,
    ApiUnavailable,
    KubeApi,
    path,
)
from elbgate.lease import format_microtime
from elbgate.logs import log
from elbgate.names import (
    BATCH_WORK_SEEN_ANNOTATION,
    HOLDER_POD_ANNOTATION,
    HOLDER_USER_ANNOTATION,
    LIVENESS_CONFIGMAP,
    ORPHANED_SINCE_ANNOTATION,
)

logger = logging.getLogger("controller.apply")

MANAGED_BY = {"app.kubernetes.io/managed-by": "elb-gate-controller"}


class Outcome(Enum):
    DONE = "done"
    CONFLICT = "conflict"
    GONE = "gone"
    FAILED = "failed"
    NOT_LEADER = "not_leader"


class Applier:
    """Carries out plan actions against the API."""

    def __init__(
        self,
        api: KubeApi,
        cache: Cache,
        metrics: ControllerMetrics,
        instance: str,
        may_act: Callable[[], bool],
        clock: Callable[[], datetime],
    ) -> None:
        self.api = api
        self.cache = cache
        self.metrics = metrics
        self.instance = instance
        self.may_act = may_act
        self.clock = clock
        self._finishing: set[asyncio.Task[Outcome]] = set()

    async def apply(self, action: Action) -> Outcome:
        """Apply one action; never raises for API trouble (the outcome says what happened).

        Only a leader starts a write; but once started, a write runs to its end — its
        log line, metric and Event included — even if leadership is lost meanwhile and
        the caller is cancelled: a cancelled request may still land, and a reclaim or
        a deletion must never happen unrecorded."""
        if not self.may_act():
            return Outcome.NOT_LEADER
        task = asyncio.ensure_future(self._apply_started(action))
        self._finishing.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._finishing.discard)
        return await asyncio.shield(task)

    async def _apply_started(self, action: Action) -> Outcome:
        try:
            match action:
                case ReleaseLease():
                    await self._release(action)
                case RecordBatchWork():
                    await self._record(action)
                case MarkOrphan():
                    await self._mark(action)
                case UnmarkOrphan():
                    await self._unmark(action)
                case DeleteOrphan():
                    await self._delete(action)
                case WriteLiveness():
                    await self._write_liveness(action)
        except ApiError as exc:
            if exc.conflict and isinstance(action, UnmarkOrphan):
                # A finished Job is out of the live watch: no event will bring its newer
                # version, so its stale ref is dropped rather than retried forever.
                self.cache.forget_finished(action.job.namespace, action.job.name)
            if exc.conflict:
                log(
                    logger,
                    logging.INFO,
                    "conflict: object changed since observed; re-observing",
                    action=type(action).__name__,
                    detail=exc.message,
                )
                return Outcome.CONFLICT
            if exc.not_found:
                log(
                    logger,
                    logging.INFO,
                    "object already gone",
                    action=type(action).__name__,
                    detail=exc.message,
                )
                if isinstance(action, RecordBatchWork | MarkOrphan | UnmarkOrphan):
                    # A Job that left the live watch may have been deleted, not finished.
                    job = action.job
                    self.cache.forget_job(job.namespace, job.name, job.resource_version)
                return Outcome.GONE
            self._api_error(action)
            log(
                logger,
                logging.WARNING,
                "write refused",
                action=type(action).__name__,
                code=exc.code,
                reason=exc.reason,
                detail=exc.message,
            )
            return Outcome.FAILED
        except ApiUnavailable as exc:
            self._api_error(action)
            log(
                logger,
                logging.WARNING,
                "write got no answer",
                action=type(action).__name__,
                detail=str(exc),
            )
            return Outcome.FAILED
        return Outcome.DONE

    def _api_error(self, action: Action) -> None:
        verb, resource = _VERB_RESOURCE[type(action)]
        self.metrics.record_api_error(verb, resource)

    # -- the writes ------------------------------------------------------------

    async def _release(self, a: ReleaseLease) -> None:
        patch = {
            "metadata": {
                "resourceVersion": a.resource_version,
                "annotations": {HOLDER_USER_ANNOTATION: None, HOLDER_POD_ANNOTATION: None},
            },
            "spec": {"holderIdentity": None},
        }
        result = await self.api.merge_patch(path(LEASES, a.namespace, a.name), patch)
        self.cache.write_through(Kind.LEASES, a.namespace, a.resource_version, result)
        now = self.clock()
        latency = (
            max(0.0, (now - a.evidence_since).total_seconds())
            if a.evidence_since is not None
            else None
        )
        self.metrics.record_reclaim(a.namespace, a.reason, a.evidence, latency)
        log(
            logger,
            logging.WARNING,
            "submit Lease reclaimed",
            namespace=a.namespace,
            name=a.name,
            holder=a.holder,
            reason=a.reason,
            evidence=a.evidence or None,
            seconds_after_evidence=round(latency, 3) if latency is not None else None,
            detail=a.message,
        )
        reason = (
            events.LEASE_EXPIRED_RECLAIMED
            if a.reason == "expired"
            else events.LEASE_HOLDER_GONE_RECLAIMED
        )
        meta = result.get("metadata") or {}
        ref = events.involved(
            "coordination.k8s.io/v1", "Lease", a.namespace, a.name, str(meta.get("uid") or "")
        )
        await self._event(ref, reason, a.message, "Warning")

    async def _patch_job_mark(self, job: JobRef, value: str | None) -> dict[str, Any]:
        patch = {
            "metadata": {
                "resourceVersion": job.resource_version,
                "annotations": {ORPHANED_SINCE_ANNOTATION: value},
            }
        }
        result = await self.api.merge_patch(path(JOBS, job.namespace, job.name), patch)
        self.cache.write_through(Kind.JOBS, job.namespace, job.resource_version, result)
        return result

    async def _record(self, a: RecordBatchWork) -> None:
        job = a.job
        annotations: dict[str, str | None] = {
            BATCH_WORK_SEEN_ANNOTATION: record_value(a.since, a.seen)
        }
        if job.orphaned_since:
            annotations[ORPHANED_SINCE_ANNOTATION] = None  # no longer an orphan
        patch = {"metadata": {"resourceVersion": job.resource_version, "annotations": annotations}}
        result = await self.api.merge_patch(path(JOBS, job.namespace, job.name), patch)
        self.cache.write_through(Kind.JOBS, job.namespace, job.resource_version, result)
        log(
            logger,
            logging.INFO,
            "batch work recorded on finalizer",
            namespace=job.namespace,
            name=job.name,
            job_id=job.job_id,
            seen=a.seen,
            unmarked=bool(job.orphaned_since),
        )

    async def _mark(self, a: MarkOrphan) -> None:
        await self._patch_job_mark(a.job, format_microtime(a.since))
        log(
            logger,
            logging.WARNING,
            "orphaned finalizer marked",
            namespace=a.job.namespace,
            name=a.job.name,
            job_id=a.job.job_id,
            detail=a.message,
        )
        await self._event(_job_ref(a.job), events.ORPHANED_FINALIZER, a.message, "Warning")

    async def _unmark(self, a: UnmarkOrphan) -> None:
        await self._patch_job_mark(a.job, None)
        log(
            logger,
            logging.INFO,
            "orphan mark removed",
            namespace=a.job.namespace,
            name=a.job.name,
            job_id=a.job.job_id,
            detail=a.message,
        )

    async def _delete(self, a: DeleteOrphan) -> None:
        job = a.job
        await self.api.delete(
            path(JOBS, job.namespace, job.name),
            resource_version=job.resource_version,
            uid=job.uid,
            propagation="Background",
        )
        self.cache.forget_job(job.namespace, job.name, job.resource_version)
        self.metrics.record_orphan_deleted(job.namespace)
        log(
            logger,
            logging.WARNING,
            "orphaned finalizer deleted",
            namespace=job.namespace,
            name=job.name,
            job_id=job.job_id,
            uid=job.uid,
            detail=a.message,
        )
        await self._event(_job_ref(job), events.ORPHANED_FINALIZER_DELETED, a.message, "Warning")

    async def _write_liveness(self, a: WriteLiveness) -> None:
        data = dict(a.data)
        if a.resource_version:
            patch = {"metadata": {"resourceVersion": a.resource_version}, "data": data}
            result = await self.api.merge_patch(
                path(CONFIGMAPS, a.namespace, LIVENESS_CONFIGMAP), patch
            )
        else:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": LIVENESS_CONFIGMAP,
                    "namespace": a.namespace,
                    "labels": dict(MANAGED_BY),
                },
                "data": data,
            }
            # 409 AlreadyExists: another writer made it; the watch will tell us its version.
            result = await self.api.create(path(CONFIGMAPS, a.namespace), body)
        self.cache.write_through(Kind.CONFIGMAPS, a.namespace, a.resource_version, result)
        level = logging.DEBUG if a.why == "heartbeat" else logging.INFO
        log(
            logger,
            level,
            "liveness written",
            namespace=a.namespace,
            why=a.why,
            in_use=data.get("inUse"),
            active_job_ids=data.get("activeJobIds"),
            lease_holder=data.get("leaseHolder"),
        )

    async def _event(
        self, ref: dict[str, str], reason: str, message: str, event_type: events.EventType
    ) -> None:
        body = events.event_body(ref, reason, message, event_type, self.instance, self.clock())
        try:
            await self.api.create(path(EVENTS, ref["namespace"]), body)
        except (ApiError, ApiUnavailable) as exc:
            self.metrics.record_api_error("create", "events")
            log(
                logger,
                logging.WARNING,
                "could not record Event",
                reason=reason,
                namespace=ref["namespace"],
                name=ref["name"],
                detail=str(exc),
            )


def _job_ref(job: JobRef) -> dict[str, str]:
    return events.involved("batch/v1", "Job", job.namespace, job.name, job.uid)


_VERB_RESOURCE: dict[type, tuple[str, str]] = {
    ReleaseLease: ("patch", "leases"),
    RecordBatchWork: ("patch", "jobs"),
    MarkOrphan: ("patch", "jobs"),
    UnmarkOrphan: ("patch", "jobs"),
    DeleteOrphan: ("delete", "jobs"),
    WriteLiveness: ("patch", "configmaps"),
}
