"""Gate A judged exactly, from the API server's audit log.

The control plane records every write to a Job or a Lease at ``RequestResponse``
level: who the API server authenticated (``user.username``), the verb, the object as
committed (``responseObject``, with its ``resourceVersion``) and when the request was
received and answered. From that alone this module rebuilds each submit Lease's
history and judges:

* every committed Job CREATE that Gate A applies to: did its requester hold the Lease
  *at the resourceVersion the Job committed at* — held, by the holder whose acquiring
  write the API server authenticated as that same user, and not expired before the
  request even reached the API server?
* every Lease write: a takeover (holder A → B) only once A had expired; a renewal only
  by A's user; a release by anyone else only after expiry or by the controller; the
  ``elb-gate.io/holder-user`` stamp equal to the user the API server authenticated.

Deletes. The API server answers a DELETE of an object without finalizers (a Lease)
with a ``Status``, not the object: its audit record names the object's ``uid``
(``details.uid``) but no ``resourceVersion``. The revision a delete committed at is the
``resourceVersion`` of the watch's ``DELETED`` event of that ``uid`` (a ``uid`` is
deleted once), so :func:`recorded` keeps such a record's ``uid``, and
:meth:`Delete.at` places one at the revision the watch saw. Who deleted, and when the
request arrived, still come from the audit log alone.

Lost answers. A write whose client went away before the answer (its own deadline, a
dropped connection) is logged with ``504`` ("request did not complete within requested
timeout - context canceled") and no object, though it may have committed: the watch
then shows a revision no committed record names. :func:`recorded` keeps such
records, and :meth:`LostAnswer.at` places one at the revision of the watch event it
accounts for: the same object, and, for a compare-and-swap update, the revision its
precondition named was the object's previous one. The user and the times still come
from the audit log; the object from the watch.

Ordering. ``resourceVersion`` is etcd's revision: one counter for the whole store, so
two writes' order is the order of their resourceVersions, compared as integers. That
holds here because the control plane runs a single etcd member (the Kubernetes API
promises only that resourceVersions are opaque strings; ordering them is sound on one
etcd, which is what this suite runs).

Time. Expiry is ``renewTime + leaseDurationSeconds + skew`` (elb-gate stamps
``renewTime`` on its own clock, the machine's, the one the API server writes its audit
timestamps with). A decision about a request happens between the request's arrival
(``requestReceivedTimestamp``) and its answer (``stageTimestamp``): a holder that had
expired before the request arrived cannot have been in force for it, and a holder
whose expiry is after the answer was in force for all of it. Nothing else is assumed:
no slack.

Like :mod:`testbed.reliability.oracle`, this imports nothing from elb-gate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

HOLDER_USER_ANNOTATION = "elb-gate.io/holder-user"
LEASE_PREFIX = "elb-blast-submit-"


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time (any fractional digits: since 3.11 ``fromisoformat`` reads them,
    and ``Z``), ``None`` when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else ``{}`` (a record may hold anything)."""
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Request:
    """What every audit record of a write names: the object, who asked, and when."""

    resource: str
    namespace: str
    name: str
    user: str
    received: datetime
    answered: datetime

    def _written(self, rv: int, verb: str, obj: Mapping[str, Any]) -> Write:
        """This request as a write committed at revision ``rv`` with ``obj``."""
        asked = {f.name: getattr(self, f.name) for f in fields(Request)}
        return Write(rv=rv, verb=verb, obj=obj, **asked)


def request_fields(event: Mapping[str, Any], name: object = None) -> dict[str, Any] | None:
    """The :class:`Request` fields of an audit ``event`` (``name``: the object's, when the
    record's ``objectRef`` has none); ``None`` when a time is missing or unreadable."""
    ref = event.get("objectRef") or {}
    received = parse_time(event.get("requestReceivedTimestamp"))
    answered = parse_time(event.get("stageTimestamp"))
    if received is None or answered is None:
        return None
    return {
        "resource": str(ref.get("resource") or ""),
        "namespace": str(ref.get("namespace") or ""),
        "name": str(ref.get("name") or name or ""),
        "user": str((event.get("user") or {}).get("username") or ""),
        "received": received,
        "answered": answered,
    }


@dataclass(frozen=True)
class Write(Request):
    """One committed write, as the audit log recorded it."""

    rv: int
    verb: str
    obj: Mapping[str, Any]
    """The committed object (``responseObject``)."""

    @property
    def labels(self) -> Mapping[str, Any]:
        return _mapping(_mapping(self.obj.get("metadata")).get("labels"))

    @property
    def uid(self) -> str:
        return str(_mapping(self.obj.get("metadata")).get("uid") or "")


def final_record(event: Mapping[str, Any]) -> bool:
    """Whether an audit ``event`` is a request's last record (``ResponseComplete``) about
    the object itself: not about a subresource, and not a dry run (it commits nothing)."""
    return (
        event.get("stage") == "ResponseComplete"
        and not (event.get("objectRef") or {}).get("subresource")
        and "dryRun" not in str(event.get("requestURI") or "")
    )


@dataclass(frozen=True)
class Delete(Request):
    """A committed DELETE the API server answered with a ``Status``: the object's
    ``uid``, who deleted it and when, but not the revision it committed at."""

    uid: str

    def at(self, rv: int) -> Write:
        """This delete as a write at revision ``rv`` (the watch's ``DELETED`` event)."""
        meta = {"name": self.name, "namespace": self.namespace, "uid": self.uid}
        return self._written(rv, "delete", {"kind": "Status", "metadata": meta})


@dataclass(frozen=True)
class LostAnswer(Request):
    """A write answered ``504`` (its client's context ended first): it may have
    committed, at a revision the audit log does not name."""

    verb: str
    precondition: str
    """The ``resourceVersion`` its body named (a compare-and-swap), or ``""``."""

    def at(self, rv: int, obj: Mapping[str, Any]) -> Write:
        """This write as committed at revision ``rv`` with ``obj`` (the watch's)."""
        return self._written(rv, self.verb, obj)


def recorded(event: Mapping[str, Any]) -> Write | Delete | LostAnswer | None:
    """What a request's last audit ``event`` (:func:`final_record`) records: a successful
    write whose answer carries the committed object; a successful DELETE answered with a
    ``Status`` (the object is gone; its ``uid`` is in ``details``); a create, update or
    patch answered ``504``. ``None`` for anything else: a refused request, a dry run (no
    resourceVersion is committed), a subresource."""
    if not final_record(event):
        return None
    code = (event.get("responseStatus") or {}).get("code")
    verb = str(event.get("verb") or "")
    if code == 504 and verb in ("create", "update", "patch"):
        meta = _mapping(_mapping(event.get("requestObject")).get("metadata"))
        asked = request_fields(event, meta.get("name"))
        if asked is None or not asked["name"]:
            return None
        return LostAnswer(verb=verb, precondition=str(meta.get("resourceVersion") or ""), **asked)
    obj = event.get("responseObject")
    if not isinstance(code, int) or not 200 <= code < 300 or not isinstance(obj, Mapping):
        return None
    if verb == "delete" and obj.get("kind") == "Status":
        uid = str(_mapping(obj.get("details")).get("uid") or "")
        asked = request_fields(event)
        return Delete(uid=uid, **asked) if uid and asked is not None else None
    meta = _mapping(obj.get("metadata"))
    rv = str(meta.get("resourceVersion") or "")
    asked = request_fields(event, meta.get("name"))
    if not rv.isdigit() or asked is None:
        return None
    return Write(rv=int(rv), verb=verb, obj=obj, **asked)


def committed_writes(events: Iterable[Mapping[str, Any]]) -> list[Write]:
    """The committed Job and Lease writes among audit ``events`` (see :func:`recorded`),
    in resourceVersion order."""
    return sorted((r for r in map(recorded, events) if isinstance(r, Write)), key=lambda w: w.rv)


def committed_deletes(events: Iterable[Mapping[str, Any]]) -> list[Delete]:
    """The DELETEs among audit ``events`` answered with a ``Status``, in log order."""
    return [r for r in map(recorded, events) if isinstance(r, Delete)]


@dataclass(frozen=True)
class Terms:
    """What expiry means in the rig: the webhook's skew and its default duration."""

    skew_seconds: float
    default_duration: int
    controller_user: str


@dataclass(frozen=True)
class LeaseState:
    """The submit Lease after one write."""

    write: Write
    holder: str
    """``spec.holderIdentity`` ("" when free, or after a delete)."""
    holder_user: str
    """The authenticated user of the write that made ``holder`` the holder."""
    stamped_user: str
    """The ``elb-gate.io/holder-user`` annotation as committed."""
    renewed: datetime | None
    duration: int | None
    deleted: bool = False

    def expiry(self, terms: Terms) -> datetime | None:
        """When the holder stops being in force (``None``: free, or never renewed)."""
        if not self.holder or self.renewed is None:
            return None
        duration = self.duration if self.duration is not None else terms.default_duration
        return self.renewed + timedelta(seconds=duration + terms.skew_seconds)


def lease_timeline(writes: Sequence[Write], namespace: str) -> list[LeaseState]:
    """The submit Lease of ``namespace`` after each of its writes, in resourceVersion order."""
    name = LEASE_PREFIX + namespace
    out: list[LeaseState] = []
    for write in writes:
        if write.resource != "leases" or write.namespace != namespace or write.name != name:
            continue
        meta = _mapping(write.obj.get("metadata"))
        if write.verb == "delete" and not meta.get("finalizers"):
            out.append(LeaseState(write, "", "", "", None, None, deleted=True))
            continue
        spec = _mapping(write.obj.get("spec"))
        notes = _mapping(meta.get("annotations"))
        holder = str(spec.get("holderIdentity") or "")
        user = out[-1].holder_user if out and out[-1].holder == holder else write.user
        duration = spec.get("leaseDurationSeconds")
        out.append(
            LeaseState(
                write,
                holder,
                user if holder else "",
                str(notes.get(HOLDER_USER_ANNOTATION) or ""),
                parse_time(spec.get("renewTime")),
                duration if isinstance(duration, int) and not isinstance(duration, bool) else None,
            )
        )
    return out


def state_before(timeline: Sequence[LeaseState], rv: int) -> LeaseState | None:
    """The Lease as it stood just before revision ``rv`` (``None``: never written)."""
    return next((state for state in reversed(timeline) if state.write.rv < rv), None)


@dataclass
class LeaseFindings:
    """What the Lease's history shows: violations, and the facts the runner checks."""

    violations: list[str] = field(default_factory=list)
    takeovers: int = 0
    """Holder changes A → B (both non-empty)."""
    live_takeovers: int = 0
    cleared_live_by_controller: list[LeaseState] = field(default_factory=list)
    """Holders the controller cleared with a request that reached the API server before
    they expired (so decided on holder-gone evidence): the state that was cleared."""


def judge_lease(timeline: Sequence[LeaseState], terms: Terms) -> LeaseFindings:
    """Check every write of one Lease against the rules the Lease guard enforces."""
    found = LeaseFindings()
    for i, after in enumerate(timeline):
        w = after.write
        if after.holder and after.stamped_user != after.holder_user:
            found.violations.append(
                f"Lease rv {w.rv}: holder {after.holder} was acquired by user "
                f"{after.holder_user!r} (as the API server authenticated it), but the stamp "
                f"says {after.stamped_user!r}"
            )
        before = timeline[i - 1] if i else None
        if before is None or not before.holder:
            continue
        expiry = before.expiry(terms)
        live = expiry is not None and expiry > w.answered
        if after.holder == before.holder:
            if w.user != before.holder_user:
                found.violations.append(
                    f"Lease rv {w.rv}: {w.user} renewed {before.holder}, held by "
                    f"{before.holder_user}"
                )
            continue
        if after.holder:
            found.takeovers += 1
            if live:
                found.live_takeovers += 1
                found.violations.append(
                    f"Lease rv {w.rv}: {w.user} took {before.holder} (user "
                    f"{before.holder_user}) over to {after.holder} at {_t(w.received)}, but it "
                    f"was in force until {_t(expiry)}"
                )
            continue
        # cleared (released or deleted)
        if w.user == terms.controller_user and not after.deleted:
            # Its request reached the API server before the expiry: the controller decided
            # before it, so on the holder-gone evidence, not on expiry.
            if expiry is not None and expiry > w.received:
                found.cleared_live_by_controller.append(before)
            continue
        if w.user == before.holder_user or not live:
            continue
        found.violations.append(
            f"Lease rv {w.rv}: {w.user} {'deleted' if after.deleted else 'released'} "
            f"{before.holder} (user {before.holder_user}) in force until {_t(expiry)}"
        )
    return found


def judge_gated_create(create: Write, timeline: Sequence[LeaseState], terms: Terms) -> str | None:
    """``None`` when the requester of a Gate A Job CREATE held the Lease at the revision
    the Job committed at; else what was wrong."""
    job = f"Job {create.name} (app={create.labels.get('app')}, rv {create.rv}) by {create.user}"
    state = state_before(timeline, create.rv)
    if state is None or state.deleted:
        return f"{job} committed while the Lease did not exist"
    if not state.holder:
        return f"{job} committed while the Lease was free (since rv {state.write.rv})"
    if state.holder_user != create.user:
        return (
            f"{job} committed while {state.holder} held the Lease, acquired by "
            f"{state.holder_user} (Lease rv {state.write.rv})"
        )
    expiry = state.expiry(terms)
    if expiry is None or expiry <= create.received:
        return (
            f"{job}: its hold {state.holder} had expired at {_t(expiry)}, before the request "
            f"arrived at {_t(create.received)}"
        )
    return None


def _t(moment: datetime | None) -> str:
    return "never" if moment is None else moment.strftime("%H:%M:%S.%f")
