"""observe → **plan** → apply: one namespace's desired writes, from a cache snapshot, the
holder-pod lookup, the settings and the time. Pure and table-tested.

The census is the shared one (:func:`elbgate.census.census_of_refs`, as the cache holds
refs), so the controller, the webhook and the CLI never disagree on what is active.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from controller.actions import Action, WriteLiveness
from controller.cache import Snapshot
from controller.liveness import LivenessView, judge_liveness
from controller.orphans import plan_orphans
from controller.reclaim import PodSeen, is_stale, plan_reclaim
from elbgate.census import Census, census_of_refs
from elbgate.settings import Settings


@dataclass(frozen=True, slots=True)
class Plan:
    """What one reconcile of one namespace found and wants done."""

    namespace: str
    actions: tuple[Action, ...]
    census: Census
    liveness: LivenessView
    lease_expired: bool


def make_plan(
    snap: Snapshot,
    pods: Mapping[str, PodSeen],
    last_seen_active: datetime | None,
    now: datetime,
    settings: Settings,
) -> Plan:
    """Plan one namespace. ``pods`` maps a Lease's ``holder-pod`` stamp to its lookup."""
    found = census_of_refs(
        snap.unfinished, now, settings.finalizer_grace_seconds, snap.batch_work_ids
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
