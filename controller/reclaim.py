"""Submit-Lease reclaim: a stale holder (held past expiry) or a dead holder (the holder-gone
rule of :mod:`controller.holders` says its process is gone). Pure; the pod is an input.

A pod the controller cannot see is *unknown*, never *gone*. A Lease with an unparseable
renewTime is never touched (the shared rule: never steal on bad data). The decision says
when to look again (the Lease's expiry, a NotReady node's bound, the reclaim grace), so
no deadline waits for the next resync.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from controller.actions import ReleaseLease
from controller.holders import PodSeen, judge_holder
from elbgate.durations import format_distance, format_duration
from elbgate.lease import (
    LeaseView,
    format_microtime,
    parse_holder_pod,
)
from elbgate.settings import ControllerSettings, GateSettings

__all__ = ["PodSeen", "ReclaimDecision", "holder_pod_to_check", "plan_reclaim"]


@dataclass(frozen=True, slots=True)
class ReclaimDecision:
    """The release to make (if any) and when to look again (if a deadline is pending)."""

    release: ReleaseLease | None = None
    look_again_at: datetime | None = None


def holder_pod_to_check(
    lease: LeaseView | None, now: datetime, gate: GateSettings
) -> tuple[str, str, str] | None:
    """``(namespace, pod, uid)`` of a held, unexpired Lease's stamped holder pod (the pod
    the controller watches); ``None`` when there is nothing to judge."""
    if lease is None or not lease.held or gate.expiry.stale(lease, now):
        return None
    if not isinstance(lease.renew_time, datetime):
        return None
    return parse_holder_pod(lease.holder_pod)


def plan_reclaim(
    lease: LeaseView | None,
    pod: PodSeen | None,
    now: datetime,
    gate: GateSettings,
    controller: ControllerSettings,
) -> ReclaimDecision:
    """The release to make, if any. ``pod`` is what is known of
    :func:`holder_pod_to_check`'s pod (``None``: nothing known)."""
    if lease is None or not lease.held:
        return ReclaimDecision()
    if gate.expiry.stale(lease, now):
        when = gate.expiry.at(lease)
        expiry = (
            f"expired at {format_microtime(when)}"
            if isinstance(when, datetime)
            else "never renewed"
        )
        return ReclaimDecision(
            ReleaseLease(
                namespace=lease.namespace,
                name=lease.name,
                resource_version=lease.resource_version,
                holder=lease.holder,
                reason="expired",
                message=(
                    f"cleared holder {lease.holder!r} of Lease {lease.name}: {expiry} "
                    "(renewTime + leaseDurationSeconds + "
                    f"{format_duration(gate.clock_skew_seconds)} skew, controller clock)"
                ),
                evidence_since=when if isinstance(when, datetime) else None,
            )
        )
    expiry_at = gate.expiry.at(lease)
    at_expiry = expiry_at if isinstance(expiry_at, datetime) else None
    stamp = holder_pod_to_check(lease, now, gate)
    renewed = lease.renew_time
    if stamp is None or pod is None or not isinstance(renewed, datetime):
        return ReclaimDecision(look_again_at=at_expiry)
    verdict = judge_holder(stamp, pod, renewed, now, controller.holder_node_not_ready_seconds)
    if verdict.gone is None:
        return ReclaimDecision(look_again_at=_earliest(verdict.look_again_at, at_expiry))
    grace_end = renewed + timedelta(seconds=controller.reclaim_grace_seconds)
    if now < grace_end:
        return ReclaimDecision(look_again_at=_earliest(grace_end, at_expiry))
    unrenewed = int((now - renewed).total_seconds())
    return ReclaimDecision(
        ReleaseLease(
            namespace=lease.namespace,
            name=lease.name,
            resource_version=lease.resource_version,
            holder=lease.holder,
            reason="dead_holder",
            message=(
                f"cleared holder {lease.holder!r} of Lease {lease.name}: its holder is gone "
                f"({verdict.gone.reason}): {verdict.gone.detail}; last renewed "
                f"{format_distance(-unrenewed)}"
            ),
            evidence=verdict.gone.reason,
            evidence_since=verdict.gone.since,
        )
    )


def _earliest(*moments: datetime | None) -> datetime | None:
    return min((m for m in moments if m is not None), default=None)
