"""A fair turn for each submit path: whose acquisition of a free turn the Lease guard
admits. Pure; the webhook reads and writes the record (``webhook/admission.py``).

The two submit paths re-check on their own clocks: the OpenAPI dispatcher every 5 s,
the dashboard's Celery task every 30 s. When a search slot frees, the first to write
the free Lease wins, so under contention the 5 s path takes about every turn, and the
30 s path's searches wait for as long as the other path has any. No client can fix it
alone; the webhook sees both: every Lease acquisition passes the Lease guard with the
requester's Kubernetes identity, and a capacity-blocked waiter shows itself by taking
the free Lease to count (then dropping it) at its cadence.

A *path* is a configured submitter identity (``ELB_GATE_SUBMITTER_IDENTITIES_FILE``):
the requester's user or groups name it. Requesters of no submitter, and split shards
(which cannot wait: the dashboard never retries one), are outside the rule.

The record (ConfigMap ``elb-gate-turns``, ``data.waiting.json``), compare-and-swapped
by the webhook replicas:

* ``paths``: per path, ``since`` (its first acquisition attempt not yet served) and
  ``seen`` (its latest). An entry not seen for ``forget`` seconds is dropped: a path
  whose waiters gave up stops counting then.
* ``held``: the free turn being kept for a path, and since when. It lapses after
  ``hold`` seconds (the slowest path's cadence and a margin): a path that does not come
  for the turn kept for it loses its place, so a vanished waiter costs a free turn at
  most ``hold`` seconds.
* ``granted``: the path the last free turn went to, and when (see
  :data:`GRANT_SECONDS`).

The rule, at an acquisition the Lease guard already admitted (the Lease is free or
expired; the guard's refusals are never touched, so no takeover of a live Lease can
come through here):

* no free turn (the census is at the ceiling): a capacity poll, whose client would
  count the ceiling and drop the Lease at once. Refused as busy (409), so it does not
  hold the Lease against the others' polls (the dashboard's tasks, finding it held,
  would not even be seen); the path is recorded as waiting.
* a free turn (a slot is free): admitted if no other live path has waited longer; the path is
  then served (its entry removed: a further waiter of it starts again at the back).
  Otherwise refused as *busy* (409 Conflict, which both clients read as "the Lease is
  taken, try again") and the turn is kept for the path that waited longest.
* a write racing for the turn just given (it replaces the same stored Lease, see
  :data:`GRANT_SECONDS`): admitted (the API server stores only one of them); its path
  is recorded as waiting.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from elbgate.lease import format_microtime, parse_microtime
from elbgate.names import TURNS_CONFIGMAP, TURNS_RECORD_KEY

SEEN_REFRESH_SECONDS = 10.0
"""A waiting path's ``seen`` is rewritten only when older than this (fewer writes)."""
GRANT_SECONDS = 60.0
"""The longest a turn just given is recognised (the API server's request timeout).
Waiters that read the free Lease at one moment write it together (the dashboard's tasks
often poll on one beat): the API server stores one of the writes, but each passes the
guard before that. They all replace the same stored Lease (one resourceVersion), which
the record keeps with the turn given: the first is served, the others, racing for the
same turn, are admitted (the API server refuses all but one) and their paths wait.
A write that replaces a later version of the Lease asks for a new turn."""


class UnreadableTurns(ValueError):
    """The record's content is not what elb-gate writes."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """One path's unserved wait."""

    since: datetime
    seen: datetime


@dataclass(frozen=True, slots=True)
class Held:
    """The free turn kept for ``path`` since ``since``."""

    path: str
    since: datetime


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """The record as read (``resource_version`` ``""``: there was none)."""

    namespace: str
    paths: Mapping[str, Waiting] = field(default_factory=dict)
    held: Held | None = None
    resource_version: str = ""
    granted: Held | None = None
    granted_over: str = ""
    """The resourceVersion of the stored Lease the turn given replaced."""

    @classmethod
    def from_configmap(cls, namespace: str, obj: Mapping[str, Any] | None) -> TurnRecord:
        if obj is None:
            return cls(namespace)
        meta = obj.get("metadata") or {}
        raw = (obj.get("data") or {}).get(TURNS_RECORD_KEY) or "{}"
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise UnreadableTurns(f"data.{TURNS_RECORD_KEY} is not JSON: {exc}") from None
        if not isinstance(doc, Mapping) or not isinstance(doc.get("paths", {}), Mapping):
            raise UnreadableTurns(f"data.{TURNS_RECORD_KEY} is not an object with 'paths'")
        paths: dict[str, Waiting] = {}
        for name, entry in (doc.get("paths") or {}).items():
            since = parse_microtime((entry or {}).get("since"))
            seen = parse_microtime((entry or {}).get("seen"))
            if not isinstance(since, datetime) or not isinstance(seen, datetime):
                raise UnreadableTurns(f"path {name!r}: since/seen is not a time")
            paths[str(name)] = Waiting(since, seen)
        held, granted = _held(doc, "held"), _held(doc, "granted")
        over = str(doc.get("grantedOver") or "")
        return cls(namespace, paths, held, str(meta.get("resourceVersion") or ""), granted, over)

    def body(self) -> dict[str, Any]:
        """The ConfigMap to write: PUT naming the resourceVersion read, or POST."""
        doc: dict[str, Any] = {
            "paths": {
                name: {"since": format_microtime(w.since), "seen": format_microtime(w.seen)}
                for name, w in sorted(self.paths.items())
            },
            "held": _held_json(self.held),
            "granted": _held_json(self.granted),
            "grantedOver": self.granted_over,
        }
        meta: dict[str, Any] = {"name": TURNS_CONFIGMAP, "namespace": self.namespace}
        if self.resource_version:
            meta["resourceVersion"] = self.resource_version
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {TURNS_RECORD_KEY: json.dumps(doc, sort_keys=True)},
        }


@dataclass(frozen=True, slots=True)
class TurnRules:
    """How long a kept turn and an unseen path last (WebhookSettings)."""

    hold_seconds: float
    forget_seconds: float


@dataclass(frozen=True, slots=True)
class Judgement:
    """The rule's answer: admit or not, whose turn it is, and the record to write
    (``None``: unchanged)."""

    allowed: bool
    reason: str
    """``no_slot``, ``just_granted``, ``served``, ``kept_for_other`` or
    ``served_after_lapse``."""
    favoured: str = ""
    favoured_since: datetime | None = None
    waited_since: datetime | None = None
    """Since when the requesting path had waited (its own entry, or now)."""
    write: TurnRecord | None = None


def judge(
    record: TurnRecord,
    path: str,
    now: datetime,
    free_turn: bool,
    rules: TurnRules,
    replaces: str = "",
) -> Judgement:
    """An acquisition by ``path`` that the Lease guard admitted (see the module doc).
    ``replaces``: the resourceVersion of the stored Lease it replaces (``oldObject``)."""
    forget = timedelta(seconds=rules.forget_seconds)
    live = {n: w for n, w in record.paths.items() if now - w.seen < forget}
    changed = live != dict(record.paths)
    held = record.held
    mine = live.get(path)
    since = mine.since if mine is not None else now
    fresh = (
        record.granted is not None
        and bool(replaces)
        and replaces == record.granted_over
        and now - record.granted.since < timedelta(seconds=GRANT_SECONDS)
    )
    if not free_turn or fresh:
        waiting = _seen(live, path, since, now)
        after = replace(record, paths=waiting, held=None)  # no free turn to keep
        dirty = changed or waiting != live or held is not None
        if not free_turn:
            # A capacity poll: its client would count the ceiling and drop the Lease.
            # Refused as busy, it leaves the Lease free for the turn when a slot frees,
            # and its path is in the line all the same.
            return Judgement(False, "no_slot", "", None, since, after if dirty else None)
        return Judgement(True, "just_granted", "", None, since, after if dirty else None)
    lapsed = ""
    if held is not None and held.path != path:
        if now - held.since >= timedelta(seconds=rules.hold_seconds):
            lapsed = held.path  # it did not come for the turn kept for it
            live.pop(held.path, None)
            held, changed = None, True
    ahead = sorted(
        ((w.since, n) for n, w in live.items() if n != path and (w.since, n) < (since, path)),
    )
    if not ahead:
        served = {n: w for n, w in live.items() if n != path}
        after = replace(
            record, paths=served, held=None, granted=Held(path, now), granted_over=replaces
        )
        reason = "served_after_lapse" if lapsed else "served"
        return Judgement(True, reason, path, since, since, after)
    first_since, first = ahead[0]
    waiting = _seen(live, path, since, now)
    kept = held if held is not None and held.path == first else Held(first, now)
    after = replace(record, paths=waiting, held=kept)
    dirty = changed or waiting != live or kept != record.held
    return Judgement(False, "kept_for_other", first, first_since, since, after if dirty else None)


def _held(doc: Mapping[str, Any], key: str) -> Held | None:
    raw = doc.get(key)
    if raw is None:
        return None
    at = parse_microtime(raw.get("since")) if isinstance(raw, Mapping) else None
    if not isinstance(raw, Mapping) or not isinstance(at, datetime) or not raw.get("path"):
        raise UnreadableTurns(f"{key}: path/since missing")
    return Held(str(raw["path"]), at)


def _held_json(held: Held | None) -> dict[str, str] | None:
    return {"path": held.path, "since": format_microtime(held.since)} if held else None


def _seen(
    live: Mapping[str, Waiting], path: str, since: datetime, now: datetime
) -> dict[str, Waiting]:
    """``live`` with ``path`` waiting since ``since``, its ``seen`` refreshed when stale."""
    out = dict(live)
    current = out.get(path)
    if current is None or (now - current.seen).total_seconds() >= SEEN_REFRESH_SECONDS:
        out[path] = Waiting(since, now)
    return out
