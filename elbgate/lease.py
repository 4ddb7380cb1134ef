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


def expires_at(
    lease: LeaseView, skew_seconds: float, default_duration: int
) -> datetime | Unparseable | None:
    """When a held Lease may be taken over: renewTime + duration + skew.
    ``None`` for a free Lease or one never renewed; :data:`UNPARSEABLE` if renewTime is."""
    if not lease.held or lease.renew_time is None:
        return None
    if isinstance(lease.renew_time, Unparseable):
        return UNPARSEABLE
    duration = lease.duration_seconds if lease.duration_seconds is not None else default_duration
    return lease.renew_time + timedelta(seconds=duration + skew_seconds)


def is_expired(lease: LeaseView, now: datetime, skew_seconds: float, default_duration: int) -> bool:
    """True when nobody holds the Lease in force: free, never renewed, or past
    expiry. An unparseable renewTime counts as held (never steal on bad data)."""
    when = expires_at(lease, skew_seconds, default_duration)
    if isinstance(when, Unparseable):
        return False
    return when is None or now >= when


def parse_holder_pod(stamp: str) -> tuple[str, str, str] | None:
    """``<ns>/<pod>/<uid>`` → ``(ns, pod, uid)``; ``None`` when malformed."""
    parts = stamp.split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]
