"""Gate A's validating rules (webhook ``lease-guard.elb-gate.io``). Pure; no I/O.

The mutating stamp runs first, so the object under review already carries the
webhook's ``renewTime`` and stamps; every judgement about *who holds the Lease
and until when* is therefore made against ``oldObject`` — the stored state,
whose ``renewTime`` was itself stamped on the webhook's clock — never against
the ``renewTime`` a client sent.

Rules (docs/design.md, "Gate A — the Lease, guarded server-side"):

* takeover (holder A → B) only when A is expired on the webhook's clock;
* renew (holder unchanged) only by A's user or A's submitter identity;
* release (A → "") only by A's user/submitter, after expiry, or by a
  controller user;
* CREATE with a holder is an acquisition; DELETE of a live Lease is refused,
  except by the namespace controller emptying a namespace being deleted (the
  Lease has nothing left to protect; refusing would leave the namespace
  Terminating until the holder's TTL ran out);
* ``leaseDurationSeconds`` within the configured bounds;
* a holder identity carrying a submitter's ``holderPrefix`` may be taken only
  by that submitter's users (the prefix cannot be borrowed);
* the write must carry the stamps the mutating webhook computes (if it did
  not run, nothing here can be trusted, so the write is refused).

"Someone else holds it" is 409 Conflict: both existing clients read it as busy.
The guard always enforces, even in ``warn`` mode (see docs/denials.md).
"""

from __future__ import annotations

from datetime import datetime

from elbgate.identities import SubmitterIdentities
from elbgate.names import NAMESPACE_CONTROLLER_USER, is_submit_lease_name
from elbgate.settings import GateSettings, WebhookSettings
from webhook.decision import Decision, admit, refuse
from webhook.lease_request import LeaseRequest
from webhook.lease_stamp import expected_stamps
from webhook.requester import holds, reserving_submitter
from webhook.wording import IDENTITIES_VAR, expiry_phrase, holder_phrase


def decide(
    request: LeaseRequest,
    gate: GateSettings,
    webhook: WebhookSettings,
    now: datetime,
    identities: SubmitterIdentities | None = None,
) -> Decision:
    """Admit or refuse one write to a Lease. The stored state arrives with the
    request (``oldObject``), so the guard needs no observation of its own."""
    ids = identities or SubmitterIdentities()
    if not is_submit_lease_name(request.name):
        return admit("not_gated")
    if request.operation == "DELETE":
        return _delete(request, gate, now)
    if request.operation not in ("CREATE", "UPDATE"):
        return admit("not_gated")
    if request.new is None:
        return refuse(
            400, "malformed", f"Lease guard: the request for Lease {request.ref} carries no object"
        )
    if request.operation == "UPDATE" and request.old is None:
        return refuse(
            400,
            "malformed",
            f"Lease guard: the UPDATE of Lease {request.ref} carries no oldObject to judge",
        )
    if not request.new.held:
        return _release(request, gate, webhook, now, ids)
    return _hold(request, gate, webhook, now, ids)


def _delete(request: LeaseRequest, gate: GateSettings, now: datetime) -> Decision:
    old = request.old
    if old is None:
        return refuse(
            503,
            "unverified",
            f"Lease guard: the DELETE of Lease {request.ref} carries no oldObject, so elb-gate "
            "cannot tell whether it is held; refusing (fail-closed)",
        )
    if old.held and request.requester.username == NAMESPACE_CONTROLLER_USER:
        return admit("namespace_deleted", holder=old.holder)
    if old.held and not gate.expiry.passed(old, now):
        return refuse(
            409,
            "delete_live",
            f"Lease guard: Lease {request.ref} is held by {holder_phrase(old)} and "
            f"{expiry_phrase(old, gate, now)}; a live submit Lease is never deleted. Its "
            "holder releases it by clearing spec.holderIdentity; it may be deleted once expired.",
            holder=old.holder,
        )
    return admit("ok")


def _release(
    request: LeaseRequest,
    gate: GateSettings,
    webhook: WebhookSettings,
    now: datetime,
    ids: SubmitterIdentities,
) -> Decision:
    old = request.old
    if old is None or not old.held:
        return admit("ok")  # a write to a free Lease that leaves it free
    user = request.requester.username
    if user in webhook.controller_users:
        return admit("released_by_controller", holder=old.holder)
    if gate.expiry.passed(old, now):
        return admit("released_expired", holder=old.holder)
    match = holds(old, request.requester, ids)
    if match.matched:
        return admit("released", via=match.via, holder=old.holder)
    if not old.holder_user and reserving_submitter(old.holder, request.requester, ids) is None:
        return admit("released_unstamped", holder=old.holder)
    return refuse(
        409,
        "release_not_holder",
        f"Lease guard: Lease {request.ref} is held by {holder_phrase(old)} and "
        f"{expiry_phrase(old, gate, now)}; user {user} is not its holder and may not "
        "release it. Only its holder or the elb-gate controller can, or anyone once it expires.",
        holder=old.holder,
    )


def _hold(
    request: LeaseRequest,
    gate: GateSettings,
    webhook: WebhookSettings,
    now: datetime,
    ids: SubmitterIdentities,
) -> Decision:
    """A write that leaves a holder in the Lease: acquire, take over or renew."""
    new, old, requester = request.new, request.old, request.requester
    assert new is not None
    user = requester.username
    lo, hi = webhook.lease_min_duration_seconds, webhook.lease_max_duration_seconds
    duration = new.duration_seconds
    if duration is not None and not lo <= duration <= hi:
        return refuse(
            422,
            "duration_bounds",
            f"Lease guard: Lease {request.ref} spec.leaseDurationSeconds {duration} is outside "
            f"{lo}..{hi} (ELB_GATE_LEASE_MIN_DURATION_SECONDS.."
            "ELB_GATE_LEASE_MAX_DURATION_SECONDS); "
            f"use BLAST_SUBMIT_LEASE_TTL_SECONDS ({gate.lease_ttl_seconds}).",
        )
    stamps = expected_stamps(old, new.holder, requester)
    if (new.holder_user, new.holder_pod) != (stamps.user, stamps.pod):
        return refuse(
            403,
            "stamp_mismatch",
            f"Lease guard: the write to Lease {request.ref} carries holder-user "
            f"{new.holder_user!r}, holder-pod {new.holder_pod!r} where elb-gate stamps "
            f"{stamps.user!r}, {stamps.pod!r}: the lease-stamp.elb-gate.io mutating webhook did "
            "not run or was overridden. Fix: check MutatingWebhookConfiguration elb-gate.",
        )
    if old is not None and old.holder == new.holder:
        match = holds(old, requester, ids)
        if match.matched:
            return admit("renewed", via=match.via, holder=new.holder)
        if not old.holder_user and reserving_submitter(old.holder, requester, ids) is None:
            return admit("adopted", holder=new.holder)
        return refuse(
            409,
            "not_holder",
            f"Lease guard: Lease {request.ref} is held by {holder_phrase(old)} and "
            f"{expiry_phrase(old, gate, now)}; user {user} may not renew it. Only its holder "
            "can; take it over under your own holderIdentity once it expires.",
            holder=old.holder,
        )
    reserved = reserving_submitter(new.holder, requester, ids)
    if reserved is not None:
        return refuse(
            403,
            "prefix_reserved",
            f"Lease guard: holderIdentity {new.holder} carries the holderPrefix "
            f"{reserved.holder_prefix!r} of submitter `{reserved.name}`, and user {user} is not "
            f"one of its users. Fix: use your own holder prefix, or map user {user} to submitter "
            f"`{reserved.name}` in {IDENTITIES_VAR}.",
        )
    if old is not None and old.held:
        if not gate.expiry.passed(old, now):
            return refuse(
                409,
                "takeover_live",
                f"Lease guard: Lease {request.ref} is held by {holder_phrase(old)} and "
                f"{expiry_phrase(old, gate, now)} on elb-gate's clock; {new.holder} "
                f"(user {user}) cannot take it over before then. Wait for its release or expiry.",
                holder=old.holder,
            )
        return admit("taken_over", holder=new.holder, previous=old.holder)
    return admit("acquired", holder=new.holder)
