"""Watch every committed write and check the promises at that instant.

``emu.subscribe`` calls :meth:`Observer._on_write` synchronously after each commit,
under the store's lock, so what it reads (``emu.list``) is exactly the state that
write produced. Per watched namespace it checks, after every write:

* active searches (``elbgate.census`` over the namespace's current Jobs) <= ceiling;
* live holders <= 1: submitters that believe they hold the Lease and whose hold has
  not expired (a holder whose hold expired may still believe, but is no longer live);
* no takeover of an unexpired holder, and no clearing of an unexpired holder that
  still believes it holds (only a release by itself, an expiry or a dead holder frees);
* a Job that opens a search, and every finalizer, is created by the user the Lease's
  ``holder-user`` stamp names, while the Lease is held and unexpired (Gate A).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from elbgate.census import census
from elbgate.lease import LeaseView, expires_at, is_expired
from elbgate.names import APP_LABEL, FINALIZER_APP, JOB_ID_LABEL, SEARCH_APPS, lease_name
from tests.kube_emulator import Emulator

SUBMITTER_ANNOTATION = "reliability.test/submitter"
"""Username of the submitter that created a Job (set by the suite's submitters)."""
COMMIT_LATENCY = timedelta(seconds=5)
"""The webhook judges the Lease during its call and the Job commits right after it;
the call cannot outlast the configuration's ``timeoutSeconds`` (5). A Lease that
expired less than this before the commit may still have been live when judged."""


class Holder(Protocol):
    """What the observer asks of a submitter."""

    username: str
    crashed: bool

    def believes_holding(self) -> bool: ...


@dataclass
class NamespaceRecord:
    """Everything observed in one namespace during one schedule."""

    namespace: str
    ceiling: int
    grace_seconds: float
    skew_seconds: float
    default_ttl: int
    holders: Mapping[str, Holder]
    writes: int = 0
    max_active: int = 0
    max_live_holders: int = 0
    violations: list[str] = field(default_factory=list)
    lease: LeaseView | None = None
    active_ids: tuple[str, ...] = ()
    expiry_by_user: dict[str, datetime] = field(default_factory=dict)
    """The latest expiry of each user's hold, from the Lease as stored."""
    holds_by_user: dict[str, set[str]] = field(default_factory=dict)
    """Holder identities each user has held."""
    freed: list[tuple[str, str, str, bool, datetime]] = field(default_factory=list)
    """(holder, user, "takeover"|"cleared", was_live, when) for every holder that left."""
    reclaim_events: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) of the controller's Lease reclaim Events."""
    gate_a_checked: int = 0
    active_at: dict[str, datetime] = field(default_factory=dict)
    """When each search id was last seen active (after a write)."""
    held_until: dict[str, datetime] = field(default_factory=dict)
    """Per user: the end of their latest hold (its expiry, or when it was released)."""

    def violation(self, text: str) -> None:
        self.violations.append(text)


class Observer:
    """Subscribes once to an emulator; namespaces are watched and unwatched per schedule."""

    def __init__(self, emu: Emulator, clock: Callable[[], datetime] | None = None) -> None:
        self.emu = emu
        self.clock = clock or (lambda: datetime.now(UTC))
        self._records: dict[str, NamespaceRecord] = {}
        self._lock = threading.Lock()
        self._unsubscribe = emu.subscribe(self._on_write)

    def close(self) -> None:
        self._unsubscribe()

    def watch(
        self,
        namespace: str,
        holders: Mapping[str, Holder],
        *,
        ceiling: int,
        grace_seconds: float = 300.0,
        skew_seconds: float = 1.0,
        default_ttl: int = 5,
    ) -> NamespaceRecord:
        """Start checking ``namespace``; ``holders`` maps usernames to submitters."""
        record = NamespaceRecord(
            namespace, ceiling, grace_seconds, skew_seconds, default_ttl, holders
        )
        found = self.emu.find("leases", namespace, lease_name(namespace))
        record.lease = LeaseView.from_dict(found) if found else None
        with self._lock:
            self._records[namespace] = record
        return record

    def unwatch(self, namespace: str) -> NamespaceRecord | None:
        with self._lock:
            return self._records.pop(namespace, None)

    # -- the subscriber ------------------------------------------------------------------

    def _on_write(self, event: str, resource: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        record = self._records.get(str(meta.get("namespace") or ""))
        if record is None:
            return
        try:
            self._check(record, event, resource, obj)
        except Exception as exc:  # a bug here must show, not vanish in the emulator's log
            record.violation(f"observer failed on {event} {resource}: {exc!r}")

    def _check(
        self, record: NamespaceRecord, event: str, resource: str, obj: dict[str, Any]
    ) -> None:
        record.writes += 1
        now = self.clock()
        if resource == "events":
            reason = str(obj.get("reason") or "")
            if reason.startswith("Lease"):
                record.reclaim_events.append((reason, str(obj.get("message") or "")))
            return
        if resource == "leases" and obj["metadata"].get("name") == lease_name(record.namespace):
            self._lease_changed(
                record, None if event == "DELETED" else LeaseView.from_dict(obj), now
            )
        if resource not in ("jobs", "leases"):
            return
        seen = census(self.emu.list("jobs", record.namespace), now, record.grace_seconds)
        if seen.count > record.ceiling:
            record.violation(
                f"{seen.count} active searches > ceiling {record.ceiling}: {seen.active_ids}"
            )
        record.max_active = max(record.max_active, seen.count)
        if resource == "jobs" and event == "ADDED":
            self._gate_a(record, obj, now)
        record.active_ids = seen.active_ids
        for key in seen.active_ids:
            record.active_at[key] = now
        live = self._live_holders(record, now)
        record.max_live_holders = max(record.max_live_holders, len(live))
        if len(live) > 1:
            record.violation(f"{len(live)} live holders at once: {sorted(live)}")

    def _lease_changed(self, record: NamespaceRecord, new: LeaseView | None, now: datetime) -> None:
        old = record.lease
        if old is not None and old.held and (new is None or new.holder != old.holder):
            live = not is_expired(old, now, record.skew_seconds, record.default_ttl)
            takeover = new is not None and new.held
            until = expires_at(old, record.skew_seconds, record.default_ttl)
            if isinstance(until, datetime):
                record.held_until[old.holder_user] = min(until, now)
            record.freed.append(
                (old.holder, old.holder_user, "takeover" if takeover else "cleared", live, now)
            )
            owner = record.holders.get(old.holder_user)
            if live and takeover:
                record.violation(
                    f"{new.holder if new else '?'} took the Lease over from {old.holder} "
                    f"(user {old.holder_user}) before it expired"
                )
            elif live and owner is not None and owner.believes_holding():
                record.violation(
                    f"holder {old.holder} (user {old.holder_user}) was cleared while live and "
                    "still holding"
                )
        if new is not None and new.held and new.holder_user:
            record.holds_by_user.setdefault(new.holder_user, set()).add(new.holder)
            until = expires_at(new, record.skew_seconds, record.default_ttl)
            if isinstance(until, datetime):
                record.expiry_by_user[new.holder_user] = until
                record.held_until[new.holder_user] = until
        record.lease = new

    def _gate_a(self, record: NamespaceRecord, job: dict[str, Any], now: datetime) -> None:
        meta = job.get("metadata") or {}
        labels = meta.get("labels") or {}
        creator = (meta.get("annotations") or {}).get(SUBMITTER_ANNOTATION)
        app, job_id = labels.get(APP_LABEL), str(labels.get(JOB_ID_LABEL) or "")
        if creator is None or app not in SEARCH_APPS:
            return
        # The webhook decided somewhere in the call before this commit (at most
        # COMMIT_LATENCY ago): judge against what held at any instant of that window.
        window_start = now - COMMIT_LATENCY
        joined = record.active_at.get(job_id)
        if app != FINALIZER_APP and job_id and joined is not None and joined >= window_start:
            return  # joins an active search: Gate A does not apply
        record.gate_a_checked += 1
        held_until = record.held_until.get(creator)
        if held_until is None or held_until < window_start:
            lease = record.lease
            holder = (
                f"{lease.holder} (user {lease.holder_user})" if lease and lease.held else "nobody"
            )
            record.violation(
                f"Job {meta.get('name')} (app={app}) by {creator} admitted, but {creator} held "
                f"no live Lease within {COMMIT_LATENCY.total_seconds():g}s before (now held by "
                f"{holder})"
            )

    def _live_holders(self, record: NamespaceRecord, now: datetime) -> set[str]:
        live = set()
        for user, holder in record.holders.items():
            until = record.expiry_by_user.get(user)
            if until is not None and now < until and holder.believes_holding():
                live.add(user)
        return live
