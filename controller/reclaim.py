"""Submit-Lease reclaim: a stale holder (held past expiry) or a dead holder (its pod is
gone or was recreated). Pure; the pod lookup is an input.

A pod GET that failed is *unknown*, never *gone*: only a 404 or a different uid proves
the holder's pod is dead. A Lease with an unparseable renewTime is never touched (the
shared rule: never steal on bad data).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from controller.actions import ReleaseLease
from elbgate.lease import (
    LeaseView,
    expires_at,
    format_microtime,
    is_expired,
    parse_holder_pod,
)
from elbgate.settings import Settings


@dataclass(frozen=True, slots=True)
class PodSeen:
    """What a GET of the holder's pod said."""

    state: Literal["present", "absent", "unknown"]
    uid: str = ""
    detail: str = ""
    """For ``unknown``: the error, for the log."""


def is_stale(lease: LeaseView | None, now: datetime, settings: Settings) -> bool:
    """Held, and past renewTime + duration + skew on the controller's clock."""
    return (
        lease is not None
        and lease.held
        and is_expired(lease, now, settings.clock_skew_seconds, settings.lease_ttl_seconds)
    )


def holder_pod_to_check(
    lease: LeaseView | None, now: datetime, settings: Settings
) -> tuple[str, str, str] | None:
    """``(namespace, pod, uid)`` of a held, unexpired Lease's stamped holder pod when it
    has gone unrenewed longer than the reclaim grace; else ``None`` (nothing to look up,
    so a healthy namespace costs no pod GET)."""
    if lease is None or not lease.held or is_stale(lease, now, settings):
        return None
    stamp = parse_holder_pod(lease.holder_pod)
    if stamp is None or not isinstance(lease.renew_time, datetime):
        return None
    unrenewed = (now - lease.renew_time).total_seconds()
    return stamp if unrenewed > settings.reclaim_grace_seconds else None


def plan_reclaim(
    lease: LeaseView | None, pod: PodSeen | None, now: datetime, settings: Settings
) -> ReleaseLease | None:
    """The release to make, if any. ``pod`` is the lookup of :func:`holder_pod_to_check`'s
    answer (``None`` when none was needed or made)."""
    if lease is None or not lease.held:
        return None
    if is_stale(lease, now, settings):
        when = expires_at(lease, settings.clock_skew_seconds, settings.lease_ttl_seconds)
        expiry = (
            f"expired at {format_microtime(when)}"
            if isinstance(when, datetime)
            else "never renewed"
        )
        return ReleaseLease(
            namespace=lease.namespace,
            name=lease.name,
            resource_version=lease.resource_version,
            holder=lease.holder,
            reason="expired",
            message=(
                f"cleared holder {lease.holder!r} of Lease {lease.name}: {expiry} "
                f"(renewTime + leaseDurationSeconds + {settings.clock_skew_seconds}s skew, "
                f"controller clock)"
            ),
        )
    stamp = holder_pod_to_check(lease, now, settings)
    if stamp is None or pod is None or pod.state == "unknown":
        return None
    pod_ns, pod_name, uid = stamp
    if pod.state == "present" and pod.uid == uid:
        return None
    why = (
        "no longer exists"
        if pod.state == "absent"
        else f"was recreated (uid {pod.uid}, holder had {uid})"
    )
    if not isinstance(lease.renew_time, datetime):  # checked above; narrows the type
        return None
    unrenewed = int((now - lease.renew_time).total_seconds())
    return ReleaseLease(
        namespace=lease.namespace,
        name=lease.name,
        resource_version=lease.resource_version,
        holder=lease.holder,
        reason="dead_holder",
        message=(
            f"cleared holder {lease.holder!r} of Lease {lease.name}: its pod "
            f"{pod_ns}/{pod_name} {why}, and the Lease was last renewed {unrenewed}s ago "
            f"(> {settings.reclaim_grace_seconds}s grace)"
        ),
    )
