"""The waiting line of ``elb-gate submit`` users, and whose turn it is. Pure.

When a slot frees (a search goes terminal, or the submit Lease is released), every
waiter that polls on its own clock either wastes the slot until its next poll (a 30 s
poll leaves it empty 15 s on average) or, if all of them watch, rushes the Lease at once
(a thundering herd in which the fastest wins, not the one that waited longest). So
waiters queue, and only the one at the head tries at once:

* **The line.** Each waiting submitter keeps a small Lease of its own in the namespace,
  ``elb-blast-wait-<holder>`` labelled ``elb-gate.io/waiting-for=submit``, renewed
  while it waits and deleted when it leaves (slot won, gave up, stopped). The line is
  those Leases ordered by ``creationTimestamp`` — the API server's clock, the same for
  every waiter — then ``spec.acquireTime`` (microseconds, to order arrivals within one
  second), then name. An entry not renewed within its ``leaseDurationSeconds`` (+ skew)
  belongs to a waiter that died: it is skipped, and deleted by whoever sees it.
  Each waiter writes only its own entry: no compare-and-swap contention, and a crash
  costs the line nothing but the entry's TTL.
* **Whose turn.** Each waiter watches the submit Lease, the unfinished search Jobs and
  the line. When what it watches says a try could succeed — the Lease is free (or
  expired) and the census of the watched Jobs is below the ceiling — the waiter at
  position ``p`` tries once that has held for ``p x step`` seconds. The head tries at
  once; the next tries only if the head has not taken the Lease within ``step`` (it
  died or hung), and so on: deterministic backoff by position, so one slot freeing
  wakes one try, not one per waiter.
* **Fallback.** Watches can break (RBAC without ``watch``, a proxy cutting streams).
  While they are healthy a waiter still tries every ``SAFETY_POLL_SECONDS`` (jittered);
  while they are not, every poll interval, as before. The authority stays where it was:
  every try is the Lease CAS and the uncached census LIST, and the webhook decides.

Why not a queue inside the submit Lease, or one ConfigMap: the Lease is guarded (only
its holder may write it) and the existing clients rewrite it whole, dropping anything
added; one shared ConfigMap makes every waiter's heartbeat a compare-and-swap against
every other's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elbgate.census import census
from elbgate.lease import Expiry, LeaseView, format_microtime, new_lease, parse_microtime

ENTRY_PREFIX = "elb-blast-wait-"
WAITING_LABEL = "elb-gate.io/waiting-for"
WAITING_VALUE = "submit"
WAITING_SELECTOR = f"{WAITING_LABEL}={WAITING_VALUE}"
ENTRY_TTL_SECONDS = 30
"""An entry not renewed for this long (plus skew) belongs to a waiter that is gone."""
ENTRY_RENEW_SECONDS = 10.0
HANDOFF_STEP_SECONDS = 1.0
"""How long each waiter ahead gets to take a free slot before the next one tries."""
SAFETY_POLL_SECONDS = 60.0
"""Longest time between tries while the watches are healthy (a missed event costs this)."""


def entry_name(holder: str) -> str:
    """The line entry of the waiter whose holder identity is ``holder``."""
    return f"{ENTRY_PREFIX}{holder}"


def entry_body(namespace: str, holder: str, now: datetime) -> dict[str, Any]:
    """POST body of a new line entry."""
    return new_lease(
        namespace,
        entry_name(holder),
        holder,
        ENTRY_TTL_SECONDS,
        now,
        labels={WAITING_LABEL: WAITING_VALUE},
    )


def renewed_body(current: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """PUT body renewing an entry (CAS on its resourceVersion)."""
    body = {**current, "spec": {**(current.get("spec") or {})}}
    body["spec"]["renewTime"] = format_microtime(now)
    return body


@dataclass(frozen=True, slots=True)
class Entry:
    """One waiter in the line, as read from its Lease."""

    name: str
    holder: str
    created: datetime | None
    arrived: str
    """``spec.acquireTime`` as written (orders arrivals within one second)."""
    renewed: datetime | None
    ttl_seconds: int
    resource_version: str

    @classmethod
    def from_lease(cls, obj: Mapping[str, Any]) -> Entry:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        created = parse_microtime(meta.get("creationTimestamp"))
        renewed = parse_microtime(spec.get("renewTime"))
        ttl = spec.get("leaseDurationSeconds")
        return cls(
            name=str(meta.get("name") or ""),
            holder=str(spec.get("holderIdentity") or ""),
            created=created if isinstance(created, datetime) else None,
            arrived=str(spec.get("acquireTime") or ""),
            renewed=renewed if isinstance(renewed, datetime) else None,
            ttl_seconds=ttl if isinstance(ttl, int) and ttl > 0 else ENTRY_TTL_SECONDS,
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def stale(self, now: datetime, skew_seconds: float) -> bool:
        """Not renewed within its TTL plus skew (the Lease-expiry rule): its waiter is gone."""
        if self.renewed is None:
            return True
        return now >= Expiry(skew_seconds, ENTRY_TTL_SECONDS).after(self.renewed, self.ttl_seconds)


def line(entries: Iterable[Entry], now: datetime, skew_seconds: float) -> list[Entry]:
    """The live entries, first come first."""
    live = [
        e for e in entries if e.name.startswith(ENTRY_PREFIX) and not e.stale(now, skew_seconds)
    ]
    far_future = datetime.max.replace(tzinfo=now.tzinfo)
    return sorted(live, key=lambda e: (e.created or far_future, e.arrived, e.name))


def stale_entries(entries: Iterable[Entry], now: datetime, skew_seconds: float) -> list[Entry]:
    """Entries whose waiters are gone (to be deleted by whoever sees them)."""
    return [e for e in entries if e.name.startswith(ENTRY_PREFIX) and e.stale(now, skew_seconds)]


def position(
    holder: str, entries: Iterable[Entry], now: datetime, skew_seconds: float
) -> int | None:
    """How many live waiters are ahead of ``holder`` (``None``: not in the line)."""
    for index, entry in enumerate(line(entries, now, skew_seconds)):
        if entry.holder == holder:
            return index
    return None


@dataclass(frozen=True, slots=True)
class Turn:
    """Whether to try now, and if not, when to look again (monotonic seconds)."""

    try_now: bool
    look_again_at: float
    why: str


def turn(
    *,
    ahead: int | None,
    open_since: float | None,
    fallback_at: float,
    now: float,
    step: float = HANDOFF_STEP_SECONDS,
    spread: float = 0.0,
) -> Turn:
    """The waiter's move. ``ahead``: waiters ahead in the line (``None``: no line, e.g.
    the identity may not write Leases: then ``spread``, a random fraction of ``step``
    drawn once per waiter, staggers the tries instead). ``open_since``: since when the
    watches have said a try could succeed (``None``: they do not, or are blind).
    ``fallback_at``: when to try whatever the watches say."""
    if open_since is not None:
        delay = ahead * step if ahead is not None else spread
        due = open_since + delay
        if now >= due:
            return Turn(
                True, now, "slot free" if not ahead else f"slot still free after {delay:g}s"
            )
        return Turn(False, min(due, fallback_at), "my turn comes after the waiters ahead")
    if now >= fallback_at:
        return Turn(True, now, "fallback poll")
    return Turn(False, fallback_at, "waiting for a slot to free")


@dataclass(frozen=True, slots=True)
class SlotView:
    """What the watches show of the two gates, on the waiter's clock."""

    lease_free: bool
    """The submit Lease is absent, free or expired."""
    active: int
    """Active searches by the census of the watched (unfinished) search Jobs."""
    ceiling: int

    @property
    def open(self) -> bool:
        """A try could succeed: the Lease is free and there is room for one more search."""
        return self.lease_free and self.active < self.ceiling


def slot_view(
    lease: Mapping[str, Any] | None,
    jobs: Iterable[Mapping[str, Any]],
    now: datetime,
    *,
    ceiling: int,
    expiry: Expiry,
    grace_seconds: float,
) -> SlotView:
    """Judge the watched Lease and unfinished search Jobs the way a try would. Judged
    again as time passes (a Lease expires, a lone finalizer's grace runs out)."""
    free = lease is None or expiry.passed(LeaseView.from_dict(lease), now)
    counted = census(jobs, now, grace_seconds)
    return SlotView(free, counted.count, ceiling)
