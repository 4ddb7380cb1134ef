"""Gate A Lease rules: time, expiry and holder identity. Pure; no I/O.

A Lease is read straight from the API's JSON (no client model objects), so
these functions take the raw ``dict`` and pick what they need.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION

_MICROTIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)


class Unparseable:
    """Marker for a timestamp that is present but not RFC 3339."""

    def __repr__(self) -> str:
        return "UNPARSEABLE"


UNPARSEABLE = Unparseable()


def parse_microtime(value: object) -> datetime | Unparseable | None:
    """Parse a Kubernetes (Micro)Time. ``None`` when absent, :data:`UNPARSEABLE`
    when present but malformed. Accepts 0-9 fractional digits, ``Z`` or an offset."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return UNPARSEABLE
    m = _MICROTIME.match(value)
    if not m:
        return UNPARSEABLE
    date, clock, frac, zone = m.groups()
    micros = (frac[1:] + "000000")[:6] if frac else "000000"
    zone = "+00:00" if zone in ("Z", "z") else zone
    try:
        return datetime.fromisoformat(f"{date}T{clock}.{micros}{zone}").astimezone(UTC)
    except ValueError:
        return UNPARSEABLE


def format_microtime(moment: datetime) -> str:
    """Format as the apiserver writes MicroTime: ``2006-01-02T15:04:05.000000Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def held_spec(
    holder: str, duration_seconds: int, acquired: str, renewed: str, transitions: int | None = None
) -> dict[str, Any]:
    """The ``spec`` of a Lease held by ``holder``: acquired and last renewed at these
    MicroTimes (:func:`format_microtime`); ``leaseTransitions`` only when given."""
    spec: dict[str, Any] = {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": acquired,
        "renewTime": renewed,
    }
    if transitions is not None:
        spec["leaseTransitions"] = transitions
    return spec


def new_lease(
    namespace: str,
    name: str,
    holder: str,
    duration_seconds: int,
    now: datetime,
    *,
    labels: Mapping[str, str] | None = None,
    transitions: int | None = None,
) -> dict[str, Any]:
    """The POST body of a Lease that does not exist yet, held by ``holder`` from ``now``
    (acquired and renewed at once). The one builder of a new Lease: the submit Lease,
    a waiting-line entry and the controller's leader Lease are all made here."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    stamp = format_microtime(now)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": held_spec(holder, duration_seconds, stamp, stamp, transitions),
    }


def new_holder_identity(source: str) -> str:
    """``<source>-<uuid4 hex>``: the full uuid, never a truncation."""
    if not source or not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", source):
        raise ValueError(f"holder source {source!r} must be a lowercase DNS-style word")
    return f"{source}-{uuid.uuid4().hex}"


_HOLDER = re.compile(
    r"^(?P<source>.+?)-(?P<uuid>[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
)


def holder_source(holder: str) -> str | None:
    """The ``<source>`` part of a holder identity, or ``None`` if it has no uuid suffix."""
    m = _HOLDER.match(holder)
    return m.group("source") if m else None


@dataclass(frozen=True, slots=True)
class LeaseView:
    """What elb-gate reads from a ``coordination.k8s.io/v1`` Lease."""

    name: str
    namespace: str
    holder: str
    """``spec.holderIdentity``; ``""`` when free."""
    renew_time: datetime | Unparseable | None
    acquire_time: datetime | Unparseable | None
    duration_seconds: int | None
    resource_version: str
    holder_user: str
    """The ``elb-gate.io/holder-user`` stamp (``""`` if absent)."""
    holder_pod: str
    """The ``elb-gate.io/holder-pod`` stamp, ``<ns>/<pod>/<uid>`` (``""`` if absent)."""

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> LeaseView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        annotations = meta.get("annotations") or {}
        duration = spec.get("leaseDurationSeconds")
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            holder=str(spec.get("holderIdentity") or ""),
            renew_time=parse_microtime(spec.get("renewTime")),
            acquire_time=parse_microtime(spec.get("acquireTime")),
            duration_seconds=duration if isinstance(duration, int) else None,
            resource_version=str(meta.get("resourceVersion") or ""),
            holder_user=str(annotations.get(HOLDER_USER_ANNOTATION) or ""),
            holder_pod=str(annotations.get(HOLDER_POD_ANNOTATION) or ""),
        )

    @property
    def held(self) -> bool:
        return self.holder != ""


@dataclass(frozen=True, slots=True)
class Expiry:
    """The one Lease-expiry rule, applied alike by the webhook, the controller and every
    submit path: a held Lease may be taken over at renewTime + leaseDurationSeconds +
    skew, the duration being ``default_duration_seconds`` (the configured TTL) when the
    Lease carries none. Each judges on its own clock; the skew covers the difference.
    Build it from the settings (``settings.gate.expiry``), never from loose numbers."""

    skew_seconds: float
    default_duration_seconds: int

    def at(self, lease: LeaseView) -> datetime | Unparseable | None:
        """When ``lease`` may be taken over. ``None`` for a free Lease or one never
        renewed; :data:`UNPARSEABLE` if its renewTime is."""
        if not lease.held or lease.renew_time is None:
            return None
        if isinstance(lease.renew_time, Unparseable):
            return UNPARSEABLE
        return self.after(lease.renew_time, lease.duration_seconds)

    def after(self, renewed: datetime, duration_seconds: int | None) -> datetime:
        """The arithmetic itself: ``renewed`` + the duration (the default when ``None``)
        + skew."""
        duration = self.default_duration_seconds if duration_seconds is None else duration_seconds
        return renewed + timedelta(seconds=duration + self.skew_seconds)

    def passed(self, lease: LeaseView, now: datetime) -> bool:
        """Nobody holds ``lease`` in force: free, never renewed, or past expiry. An
        unparseable renewTime counts as held (never steal on bad data)."""
        when = self.at(lease)
        if isinstance(when, Unparseable):
            return False
        return when is None or now >= when

    def stale(self, lease: LeaseView | None, now: datetime) -> bool:
        """Held, and past expiry: a holder that stopped renewing (what the controller
        clears)."""
        return lease is not None and lease.held and self.passed(lease, now)


def parse_holder_pod(stamp: str) -> tuple[str, str, str] | None:
    """``<ns>/<pod>/<uid>`` → ``(ns, pod, uid)``; ``None`` when malformed."""
    parts = stamp.split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]
