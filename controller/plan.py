"""observe → **plan** → apply: one namespace's desired writes, from a cache snapshot, the
holder-pod view, the settings and the time. Pure and table-tested.

The census is the shared one (:func:`elbgate.census.census_of_refs`, as the cache holds
refs), so the controller, the webhook and the CLI never disagree on what is active. A plan
also says when to look again — the next deadline that no watch event will announce (a
finalizer's grace, an orphan's delete grace, the Lease's expiry, a NotReady node's bound) —
so no deadline waits for the periodic resync.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from controller.actions import Action, UnmarkOrphan, WriteLiveness
from controller.batch_work import plan_batch_work_records
from controller.cache import Snapshot
from controller.liveness import LivenessView, judge_liveness
from controller.orphans import plan_orphans
from controller.reclaim import PodSeen, plan_reclaim
from elbgate.census import Census, JobRef, census_of_refs
from elbgate.lease import parse_microtime
from elbgate.names import FINALIZER_APP
from elbgate.settings import ControllerSettings, GateSettings


@dataclass(frozen=True, slots=True)
class Plan:
    """What one reconcile of one namespace found and wants done."""

    namespace: str
    actions: tuple[Action, ...]
    census: Census
    liveness: LivenessView
    lease_expired: bool
    look_again_at: datetime | None = None
    """The next deadline this plan depends on (``None``: only events and the resync)."""
    split_searches: int = 0
    """Active searches the admission record says were opened as split shards."""


def make_plan(
    snap: Snapshot,
    pods: Mapping[str, PodSeen],
    last_seen_active: datetime | None,
    now: datetime,
    gate: GateSettings,
    controller: ControllerSettings,
) -> Plan:
    """Plan one namespace. ``pods`` maps a Lease's ``holder-pod`` stamp to what is known
    of that pod."""
    records = plan_batch_work_records(snap.unfinished, snap.batch_work, now)
    recorded = {r.job.name for r in records}
    # The records are on their way: judge those finalizers as finishing already, so this
    # plan never marks (or deletes) what it is about to record.
    had_batch_work = snap.batch_work_ids | {r.job.job_id for r in records}
    found = census_of_refs(snap.unfinished, now, gate.finalizer_grace_seconds, had_batch_work)
    actions: list[Action] = []
    lease = snap.lease
    reclaim = plan_reclaim(
        lease, pods.get(lease.holder_pod) if lease else None, now, gate, controller
    )
    if reclaim.release is not None:
        actions.append(reclaim.release)
    actions.extend(records)
    marked = [j for j in snap.unfinished if j.orphaned_since] + list(snap.finished_marked)
    actions.extend(
        a
        for a in plan_orphans(found, marked, now, gate, controller)
        # The record's write drops the mark too: one CAS write per Job and plan.
        if not (isinstance(a, UnmarkOrphan) and a.job.name in recorded)
    )
    previous = snap.liveness.data if snap.liveness is not None else None
    decision = judge_liveness(
        snap.namespace,
        lease,
        snap.unfinished,
        found,
        previous,
        last_seen_active,
        now,
        gate,
        controller,
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
    deadlines = [reclaim.look_again_at]
    deadlines.extend(_finalizer_deadlines(snap.unfinished, gate))
    deadlines.extend(_orphan_deadlines(found.orphans, controller))
    return Plan(
        namespace=snap.namespace,
        actions=tuple(actions),
        census=found,
        liveness=decision.view,
        lease_expired=gate.expiry.stale(lease, now),
        look_again_at=min((d for d in deadlines if d is not None and d > now), default=None),
        split_searches=len(snap.split_ids & set(found.active_ids)),
    )


def _finalizer_deadlines(jobs: Iterable[JobRef], gate: GateSettings) -> list[datetime]:
    """When each finalizer leaves its grace (it may become an orphan then)."""
    grace = timedelta(seconds=gate.finalizer_grace_seconds)
    return [j.created + grace for j in jobs if j.app == FINALIZER_APP and j.created is not None]


def _orphan_deadlines(orphans: Iterable[JobRef], controller: ControllerSettings) -> list[datetime]:
    """Under policy ``delete``: when each flagged orphan becomes due for deletion."""
    if controller.orphan_policy != "delete":
        return []
    after = timedelta(seconds=controller.orphan_delete_after_seconds)
    out = []
    for job in orphans:
        since = parse_microtime(job.orphaned_since) if job.orphaned_since else None
        if isinstance(since, datetime):
            out.append(since + after)
    return out
