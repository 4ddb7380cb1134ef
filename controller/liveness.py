"""The auto-stop liveness feed: is the namespace in use, and since when is it idle. Pure.

"In use" (docs/design.md, "Controller") = the submit Lease is held and unexpired, or any
non-terminal Job labelled ``app`` in ``ControllerSettings.liveness_apps`` exists — so a
finalizer still merging results, or a DB warm-up, is never scaled away. The ConfigMap is
written only when its content changes, plus a heartbeat so ``updatedAt`` stays fresh: a
consumer reads an ``updatedAt`` older than 3 x resync as *unknown*, never as idle
(docs/liveness.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from elbgate.census import Census, JobRef
from elbgate.lease import LeaseView, parse_microtime
from elbgate.settings import ControllerSettings, GateSettings

IN_USE = "inUse"
ACTIVE_SEARCHES = "activeSearches"
ACTIVE_JOB_IDS = "activeJobIds"
LEASE_HOLDER = "leaseHolder"
LAST_ACTIVE_TIME = "lastActiveTime"
IDLE_SINCE = "idleSince"
UPDATED_AT = "updatedAt"
KEYS = (
    IN_USE,
    ACTIVE_SEARCHES,
    ACTIVE_JOB_IDS,
    LEASE_HOLDER,
    LAST_ACTIVE_TIME,
    IDLE_SINCE,
    UPDATED_AT,
)

HEARTBEAT_FRACTION = 0.9
"""Refresh ``updatedAt`` once it is this fraction of a resync old, so the resync that
follows a write always refreshes it (timer jitter cannot skip a period): ``updatedAt``
is then never older than about 2 x resync, inside the 3 x resync staleness bound."""


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC to the second (``2026-01-02T15:04:05Z``), as ConfigMap data."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: str | None) -> datetime | None:
    parsed = parse_microtime(value)
    return parsed if isinstance(parsed, datetime) else None


@dataclass(frozen=True, slots=True)
class LivenessView:
    """One namespace's liveness as computed now (the ConfigMap, gauges and /liveness)."""

    namespace: str
    in_use: bool
    reasons: tuple[str, ...]
    """Why it is in use (empty when idle)."""
    active_searches: int
    active_ids: tuple[str, ...]
    lease_holder: str
    last_active: str
    idle_since: str
    computed_at: datetime

    def idle_seconds(self) -> float:
        since = _parse(self.idle_since)
        if self.in_use or since is None:
            return 0.0
        return max(0.0, (self.computed_at - since).total_seconds())

    def data(self) -> dict[str, str]:
        """The ConfigMap ``data`` (``updatedAt`` = when computed)."""
        return {
            IN_USE: "true" if self.in_use else "false",
            ACTIVE_SEARCHES: str(self.active_searches),
            ACTIVE_JOB_IDS: ",".join(self.active_ids),
            LEASE_HOLDER: self.lease_holder,
            LAST_ACTIVE_TIME: self.last_active,
            IDLE_SINCE: self.idle_since,
            UPDATED_AT: format_time(self.computed_at),
        }

    def as_json(self) -> dict[str, object]:
        """``GET /liveness``: the same facts, typed."""
        return {
            IN_USE: self.in_use,
            "reasons": list(self.reasons),
            ACTIVE_SEARCHES: self.active_searches,
            ACTIVE_JOB_IDS: list(self.active_ids),
            LEASE_HOLDER: self.lease_holder,
            LAST_ACTIVE_TIME: self.last_active,
            IDLE_SINCE: self.idle_since,
            UPDATED_AT: format_time(self.computed_at),
            "idleSeconds": int(self.idle_seconds()),
        }


@dataclass(frozen=True, slots=True)
class LivenessDecision:
    view: LivenessView
    write: dict[str, str] | None
    """ConfigMap data to write, or ``None`` (nothing changed and no heartbeat due)."""
    why: str
    """``created``, ``changed``, ``heartbeat`` or ``unchanged``."""


def judge_liveness(
    namespace: str,
    lease: LeaseView | None,
    unfinished: Iterable[JobRef],
    census: Census,
    previous: Mapping[str, str] | None,
    last_seen_active: datetime | None,
    now: datetime,
    gate: GateSettings,
    controller: ControllerSettings,
) -> LivenessDecision:
    """Compute the liveness and whether the ConfigMap needs a write.

    ``previous`` is the ConfigMap's current data (``None``: it does not exist);
    ``last_seen_active`` is when this process last judged the namespace in use (the
    best ``lastActiveTime`` at the moment activity ends)."""
    reasons: list[str] = []
    holder = ""
    if lease is not None and lease.held and not gate.expiry.stale(lease, now):
        holder = lease.holder
        reasons.append(f"Lease held by {holder}")
    apps = frozenset(controller.liveness_apps)
    busy = sorted({f"app={j.app}" for j in unfinished if j.app in apps})
    if busy:
        reasons.append("unfinished Jobs: " + ", ".join(busy))
    in_use = bool(reasons)
    prev = dict(previous) if previous is not None else None

    if in_use:
        last_active, idle_since = format_time(now), ""
    else:
        was_idle = prev is not None and prev.get(IN_USE) == "false"
        kept_idle = _parse(prev.get(IDLE_SINCE)) if was_idle and prev else None
        idle_since = format_time(kept_idle) if kept_idle is not None else format_time(now)
        if was_idle and prev is not None:
            last_active = prev.get(LAST_ACTIVE_TIME, "")
        elif last_seen_active is not None:
            last_active = format_time(last_seen_active)
        else:
            # Just turned idle with no in-memory sighting (a new leader): the last write
            # while in use refreshed lastActiveTime, so it is the best we know.
            last_active = (prev or {}).get(LAST_ACTIVE_TIME, "")

    view = LivenessView(
        namespace=namespace,
        in_use=in_use,
        reasons=tuple(reasons),
        active_searches=census.count,
        active_ids=census.active_ids,
        lease_holder=holder,
        last_active=last_active,
        idle_since=idle_since,
        computed_at=now,
    )
    desired = view.data()
    if prev is None:
        return LivenessDecision(view, desired, "created")
    # While in use lastActiveTime follows the clock; it is refreshed with the heartbeat,
    # not on every reconcile (that would be a write per reconcile).
    ignored = {UPDATED_AT, LAST_ACTIVE_TIME} if in_use else {UPDATED_AT}
    if any(desired[k] != prev.get(k, "") for k in KEYS if k not in ignored):
        return LivenessDecision(view, desired, "changed")
    updated = _parse(prev.get(UPDATED_AT))
    heartbeat = controller.resync_seconds * HEARTBEAT_FRACTION
    if updated is None or (now - updated).total_seconds() >= heartbeat:
        return LivenessDecision(view, desired, "heartbeat")
    return LivenessDecision(view, None, "unchanged")
