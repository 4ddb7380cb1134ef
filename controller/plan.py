"""observe → **plan** → apply: one namespace's desired writes, from a cache snapshot, the
holder-pod lookup, the settings and the time. Pure and table-tested.

The census is the shared :func:`elbgate.census.census`, so the controller, the webhook and
the CLI never disagree on what is active or orphaned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.actions import Action, WriteLiveness
from controller.cache import Snapshot
from controller.liveness import LivenessView, judge_liveness
from controller.orphans import plan_orphans
from controller.reclaim import PodSeen, is_stale, plan_reclaim
from elbgate.census import Census, JobRef, census
from elbgate.lease import format_microtime
from elbgate.names import APP_LABEL, JOB_ID_LABEL, ORPHANED_SINCE_ANNOTATION
from elbgate.settings import Settings


@dataclass(frozen=True, slots=True)
class Plan:
    """What one reconcile of one namespace found and wants done."""

    namespace: str
    actions: tuple[Action, ...]
    census: Census
    liveness: LivenessView
    lease_expired: bool


def census_document(job: JobRef) -> dict[str, Any]:
    """The minimal Job document the shared census reads, rebuilt from a cached
    :class:`JobRef` (the cache keeps refs, not whole objects; cached Jobs are unfinished,
    so no status is needed)."""
    labels = {APP_LABEL: job.app}
    if job.job_id:
        labels[JOB_ID_LABEL] = job.job_id
    meta: dict[str, Any] = {
        "name": job.name,
        "namespace": job.namespace,
        "uid": job.uid,
        "resourceVersion": job.resource_version,
        "labels": labels,
    }
    if job.created is not None:
        meta["creationTimestamp"] = format_microtime(job.created)
    if job.orphaned_since:
        meta["annotations"] = {ORPHANED_SINCE_ANNOTATION: job.orphaned_since}
    return {"metadata": meta}


def make_plan(
    snap: Snapshot,
    pods: Mapping[str, PodSeen],
    last_seen_active: datetime | None,
    now: datetime,
    settings: Settings,
) -> Plan:
    """Plan one namespace. ``pods`` maps a Lease's ``holder-pod`` stamp to its lookup."""
    found = census(
        (census_document(j) for j in snap.unfinished),
        now,
        settings.finalizer_grace_seconds,
        batch_work_ids=snap.batch_work_ids,
    )
    actions: list[Action] = []
    lease = snap.lease
    release = plan_reclaim(lease, pods.get(lease.holder_pod) if lease else None, now, settings)
    if release is not None:
        actions.append(release)
    marked = [j for j in snap.unfinished if j.orphaned_since] + list(snap.finished_marked)
    actions.extend(plan_orphans(found, marked, now, settings))
    previous = snap.liveness.data if snap.liveness is not None else None
    decision = judge_liveness(
        snap.namespace, lease, snap.unfinished, found, previous, last_seen_active, now, settings
    )
    if decision.write is not None:
        actions.append(
            WriteLiveness(
                namespace=snap.namespace,
                resource_version=snap.liveness.resource_version if snap.liveness else "",
                data=decision.write,
                why=decision.why,
            )
        )
    return Plan(
        namespace=snap.namespace,
        actions=tuple(actions),
        census=found,
        liveness=decision.view,
        lease_expired=is_stale(lease, now, settings),
    )
