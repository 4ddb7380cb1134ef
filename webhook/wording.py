"""How denials name a Lease's holder and its expiry, the same way in every message."""

from __future__ import annotations

from datetime import datetime

from elbgate.durations import format_moment
from elbgate.lease import LeaseView, Unparseable
from elbgate.settings import GateSettings

IDENTITIES_VAR = "ELB_GATE_SUBMITTER_IDENTITIES_FILE"
"""Where operators map users to submitters; denials name it so the fix is a copy-paste."""


def holder_phrase(lease: LeaseView) -> str:
    """``dashboard-1f… (user bob, pod ns/p/uid)``: the identity and who stamped it."""
    who = f"user {lease.holder_user}" if lease.holder_user else "no holder-user stamp"
    pod = f", pod {lease.holder_pod}" if lease.holder_pod else ""
    return f"{lease.holder} ({who}{pod})"


def expiry_phrase(lease: LeaseView, gate: GateSettings, now: datetime) -> str:
    """``expires 2026-…Z (in 4m10s)`` on the webhook's clock (renewTime + duration + skew)."""
    moment = gate.expiry.at(lease)
    if moment is None:
        return "has no renewTime (treated as expired)"
    if isinstance(moment, Unparseable):
        return "has an unparseable renewTime (treated as held)"
    verb = "expires" if moment > now else "expired"
    return f"{verb} {format_moment(moment, now)}"
