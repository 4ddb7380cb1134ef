"""The existing submit paths' Lease protocol, once: what to write, and the
GET / POST / PUT-with-resourceVersion sequence that writes it.

The bodies are pure functions (table-tested); the async operations run them
against :class:`KubeApi` and are shared by the sync :class:`SubmitLease` and
any async caller. A Lease is never deleted: release clears ``holderIdentity``.
Every write is a compare-and-swap on ``metadata.resourceVersion`` (PUT) or a
create that fails with 409 AlreadyExists, so this interoperates with the raw-HTTP
and kubectl clients. Any 409 — a stale resourceVersion, an existing name, or the
webhook's Lease guard ("held by …", reason Conflict) — means busy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elbgate.kube.api import LEASES, ApiError, KubeApi, path
from elbgate.kube.reads import get_submit_lease
from elbgate.lease import Expiry, LeaseView, format_microtime, new_lease
from elbgate.names import lease_name

Json = dict[str, Any]


# --- what to write (pure) ----------------------------------------------------


def new_lease_body(namespace: str, holder: str, ttl_seconds: int, now: datetime) -> Json:
    """POST body of a submit Lease that does not exist yet, held by ``holder``."""
    return new_lease(namespace, lease_name(namespace), holder, ttl_seconds, now)


def claimed_body(current: Json, holder: str, ttl_seconds: int, now: datetime) -> Json:
    """PUT body that renews (same holder) or takes over (free or expired) ``current``.
    Keeps ``resourceVersion`` so the write is a CAS, and keeps annotations."""
    body = copy.deepcopy(current)
    spec = body.setdefault("spec", {})
    stamp = format_microtime(now)
    if spec.get("holderIdentity") != holder:
        # A new holder: a new acquireTime and one more transition, as client-go does.
        spec["acquireTime"] = stamp
        transitions = spec.get("leaseTransitions")
        spec["leaseTransitions"] = (transitions if isinstance(transitions, int) else 0) + 1
    spec["holderIdentity"] = holder
    spec["leaseDurationSeconds"] = ttl_seconds
    spec["renewTime"] = stamp
    return body


def released_body(current: Json) -> Json:
    """PUT body that frees ``current`` by clearing the holder (CAS on its resourceVersion)."""
    body = copy.deepcopy(current)
    body.setdefault("spec", {})["holderIdentity"] = ""
    return body


# --- outcomes ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AcquireResult:
    """``acquired`` with the Lease as written, or busy with who holds it."""

    acquired: bool
    lease: Json | None
    """The Lease as the API returned it (written when acquired, observed when busy;
    ``None`` when busy because someone else created it first)."""
    reason: str
    """Why busy, in words (holder, expiry); ``"acquired"`` otherwise."""

    @property
    def view(self) -> LeaseView | None:
        return None if self.lease is None else LeaseView.from_dict(self.lease)


def describe_holder(view: LeaseView, expiry: Expiry) -> str:
    """``held by X (user U) until T`` for busy reasons and refusals."""
    user = f" (user {view.holder_user})" if view.holder_user else ""
    until = expiry.at(view)
    when = format_microtime(until) if isinstance(until, datetime) else "an unknown time"
    return f"held by {view.holder}{user} until {when}"


# --- the protocol (async, I/O) -----------------------------------------------


async def try_acquire(
    api: KubeApi,
    namespace: str,
    holder: str,
    *,
    ttl_seconds: int,
    expiry: Expiry,
    now: datetime,
) -> AcquireResult:
    """GET; create if absent; renew if ours; take over (CAS) if free or expired
    (``expiry``); otherwise busy. ``ttl_seconds`` is the duration it writes.
    Raises :class:`ApiError`/:class:`ApiUnavailable` on anything but a 409, which
    is busy."""
    current = await get_submit_lease(api, namespace)
    if current is None:
        try:
            created = await api.create(
                path(LEASES, namespace), new_lease_body(namespace, holder, ttl_seconds, now)
            )
        except ApiError as exc:
            if exc.conflict:
                return AcquireResult(False, None, f"created by another submitter first: {exc}")
            raise
        return AcquireResult(True, created, "acquired")
    view = LeaseView.from_dict(current)
    if view.held and view.holder != holder and not expiry.passed(view, now):
        return AcquireResult(False, current, describe_holder(view, expiry))
    try:
        written = await api.replace(
            path(LEASES, namespace, lease_name(namespace)),
            claimed_body(current, holder, ttl_seconds, now),
        )
    except ApiError as exc:
        if exc.conflict:
            return AcquireResult(False, current, f"lost the race for the Lease: {exc.message}")
        raise
    return AcquireResult(True, written, "acquired")


async def renew(
    api: KubeApi, namespace: str, holder: str, known: Json, *, ttl_seconds: int, now: datetime
) -> Json | None:
    """Renew our hold: PUT ``known`` with a new renewTime; on 409 re-read once and
    retry if we still hold it. Returns the Lease as written, or ``None`` when it is
    no longer ours (another holder, freed, or deleted)."""
    return await _write_while_ours(
        api, namespace, holder, known, lambda lease: claimed_body(lease, holder, ttl_seconds, now)
    )


async def release(api: KubeApi, namespace: str, holder: str, known: Json | None) -> bool:
    """Clear the holder if it is still ``holder``: PUT with ``known``'s
    resourceVersion, and on 409 re-read once. ``known=None`` reads first (used when
    a write's outcome is unknown). True if this call freed it, False if it was not
    ours (any more). A second conflict raises (the Lease then expires on its own)."""
    return await _write_while_ours(api, namespace, holder, known, released_body) is not None


async def _write_while_ours(
    api: KubeApi, namespace: str, holder: str, known: Json | None, body: Callable[[Json], Json]
) -> Json | None:
    """PUT ``body(known)`` (a CAS on ``known``'s resourceVersion); on 409, or with no
    ``known``, read the Lease once and PUT ``body(current)`` if ``holder`` still holds
    it. The Lease as written, or ``None`` when it is not ours (another holder, freed or
    deleted). A second conflict raises."""
    url = path(LEASES, namespace, lease_name(namespace))
    if known is not None:
        try:
            return await api.replace(url, body(known))
        except ApiError as exc:
            if not exc.conflict:
                raise
    current = await get_submit_lease(api, namespace)
    if current is None or LeaseView.from_dict(current).holder != holder:
        return None
    return await api.replace(url, body(current))
