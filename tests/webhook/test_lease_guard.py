"""The Lease guard as a table: every write is judged against oldObject on the webhook's clock.

The objects under review are what the validating webhook sees — already
stamped by the mutating webhook — so each case runs the stamp first, exactly
as the apiserver's chain does, unless it says the stamp did not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import jsonpatch
import pytest

from elbgate.identities import SubmitterIdentities
from elbgate.lease import format_microtime
from elbgate.settings import DEFAULT_CONTROLLER_USER
from tests.builders import LEASE, NOW, SETTINGS, admission, lease, user
from webhook import lease_guard, lease_stamp
from webhook.lease_request import LeaseRequest
from webhook.review import UserInfo

A = "openapi-6a1c0e6b5f8f4b83a1d2c3e4f5a6b7c8"
B = "dashboard-1f2e3d4c5b6a47989a8b7c6d5e4f3a2b"
IDENTITIES = SubmitterIdentities.parse(
    {
        "submitters": [
            {"name": "dashboard", "holderPrefix": "dashboard-", "users": ["dash", "dash-kubectl"]},
            {"name": "openapi", "holderPrefix": "openapi-", "users": ["alice", "openapi-2"]},
        ]
    }
)


def with_holder(obj: dict[str, Any], holder: str, **spec: Any) -> dict[str, Any]:
    """``obj`` as a client would PUT it: holder changed, annotations as the client left them."""
    new = jsonpatch.apply_patch(obj, [])
    new["spec"]["holderIdentity"] = holder
    new["spec"].update(spec)
    return new


def dropped(obj: dict[str, Any]) -> dict[str, Any]:
    """A full-object PUT from a client that never knew about annotations."""
    new = jsonpatch.apply_patch(obj, [])
    new["metadata"].pop("annotations", None)
    return new


@dataclass
class Case:
    operation: str
    new: dict[str, Any] | None
    old: dict[str, Any] | None
    who: UserInfo = field(default_factory=user)
    allowed: bool = True
    reason: str = "ok"
    code: int = 200
    says: tuple[str, ...] = ()
    stamped: bool = True
    """Run the mutating stamp first (the apiserver's order)."""
    identities: SubmitterIdentities = field(default_factory=SubmitterIdentities)


ALICE_HOLDS_A = lease(A, holder_user="alice", renewed_ago=60)
A_EXPIRED = lease(A, holder_user="alice", renewed_ago=931)
A_IN_SKEW = lease(A, holder_user="alice", renewed_ago=925)
FREE = lease("", renewed_ago=2000)
BOB = user("bob")
CONTROLLER = user(DEFAULT_CONTROLLER_USER)

CASES: dict[str, Case] = {
    # -- acquisition --
    "creating the Lease with a holder is an acquisition": Case(
        "CREATE", lease(A), None, reason="acquired"
    ),
    "creating a free Lease is allowed": Case("CREATE", lease(""), None),
    "acquiring a free Lease by PUT is allowed": Case(
        "UPDATE", with_holder(FREE, A), FREE, reason="acquired"
    ),
    "leaseDurationSeconds below the minimum is refused with 422": Case(
        "CREATE",
        lease(A, duration=5),
        None,
        allowed=False,
        reason="duration_bounds",
        code=422,
        says=("5 is outside 15..3600",),
    ),
    "leaseDurationSeconds above the maximum is refused": Case(
        "CREATE",
        lease(A, duration=86400),
        None,
        allowed=False,
        reason="duration_bounds",
        code=422,
    ),
    "a write the mutating stamp did not see is refused": Case(
        "CREATE",
        lease(A),
        None,
        stamped=False,
        allowed=False,
        reason="stamp_mismatch",
        code=403,
        says=("lease-stamp.elb-gate.io", "MutatingWebhookConfiguration elb-gate"),
    ),
    "a forged holder-user without the stamp is refused": Case(
        "CREATE",
        lease(A, holder_user="bob"),
        None,
        stamped=False,
        allowed=False,
        reason="stamp_mismatch",
        code=403,
    ),
    # -- renew --
    "the holder's user renews": Case("UPDATE", ALICE_HOLDS_A, ALICE_HOLDS_A, reason="renewed"),
    "a renewing PUT without annotations keeps the stamp and is allowed": Case(
        "UPDATE", dropped(ALICE_HOLDS_A), ALICE_HOLDS_A, reason="renewed"
    ),
    "another user may not renew someone else's Lease (409 Conflict)": Case(
        "UPDATE",
        ALICE_HOLDS_A,
        ALICE_HOLDS_A,
        BOB,
        allowed=False,
        reason="not_holder",
        code=409,
        says=(f"held by {A} (user alice)", "user bob may not renew it"),
    ),
    "a user of the holder's submitter renews": Case(
        "UPDATE",
        ALICE_HOLDS_A,
        ALICE_HOLDS_A,
        user("openapi-2"),
        reason="renewed",
        identities=IDENTITIES,
    ),
    "the holder renews after expiry when nobody took it": Case(
        "UPDATE", A_EXPIRED, A_EXPIRED, reason="renewed"
    ),
    "a Lease from before elb-gate is adopted by its first renewer": Case(
        "UPDATE", lease(A), lease(A), BOB, reason="adopted"
    ),
    "adoption cannot cross a configured submitter's prefix": Case(
        "UPDATE",
        lease(A),
        lease(A),
        BOB,
        identities=IDENTITIES,
        allowed=False,
        reason="not_holder",
        code=409,
    ),
    # -- takeover --
    "a takeover of a live Lease is refused with 409 naming holder and expiry": Case(
        "UPDATE",
        with_holder(ALICE_HOLDS_A, B),
        ALICE_HOLDS_A,
        BOB,
        allowed=False,
        reason="takeover_live",
        code=409,
        says=(
            f"held by {A} (user alice)",
            "expires 2026-11-29T12:14:30Z (in 14m30s)",
            "on elb-gate's clock",
            f"{B} (user bob) cannot take it over",
        ),
    ),
    "a clock-ahead takeover that bypassed the mutating stamp is refused": Case(
        "UPDATE",
        with_holder(
            ALICE_HOLDS_A,
            B,
            renewTime=format_microtime(NOW + timedelta(minutes=20)),
            acquireTime=format_microtime(NOW + timedelta(minutes=20)),
        ),
        ALICE_HOLDS_A,
        BOB,
        stamped=False,
        allowed=False,
        reason="stamp_mismatch",
        code=403,
    ),
    "a takeover by a clock-ahead client is refused with 409 while live on the webhook's clock": Case(
        "UPDATE",
        with_holder(ALICE_HOLDS_A, B, renewTime=format_microtime(NOW + timedelta(minutes=20))),
        ALICE_HOLDS_A,
        BOB,
        allowed=False,
        reason="takeover_live",
        code=409,
    ),
    "a takeover inside the skew margin is refused": Case(
        "UPDATE",
        with_holder(A_IN_SKEW, B),
        A_IN_SKEW,
        BOB,
        allowed=False,
        reason="takeover_live",
        code=409,
    ),
    "a takeover after expiry (TTL + skew) is allowed": Case(
        "UPDATE", with_holder(A_EXPIRED, B), A_EXPIRED, BOB, reason="taken_over"
    ),
    "a takeover of a Lease with an unparseable renewTime is refused": Case(
        "UPDATE",
        with_holder(lease(A, holder_user="alice", renew_raw="yesterday"), B),
        lease(A, holder_user="alice", renew_raw="yesterday"),
        BOB,
        allowed=False,
        reason="takeover_live",
        code=409,
        says=("unparseable renewTime",),
    ),
    "the same user cannot take over its own live Lease under a new identity": Case(
        "UPDATE",
        with_holder(ALICE_HOLDS_A, A + "0"),
        ALICE_HOLDS_A,
        allowed=False,
        reason="takeover_live",
        code=409,
    ),
    # -- reserved prefixes --
    "a holder identity with another submitter's prefix is refused (403)": Case(
        "UPDATE",
        with_holder(FREE, B),
        FREE,
        BOB,
        identities=IDENTITIES,
        allowed=False,
        reason="prefix_reserved",
        code=403,
        says=(
            "holderPrefix 'dashboard-' of submitter `dashboard`",
            "map user bob to submitter `dashboard` in ELB_GATE_SUBMITTER_IDENTITIES_FILE",
        ),
    ),
    "a submitter's own user may take its prefix": Case(
        "UPDATE",
        with_holder(FREE, B),
        FREE,
        user("dash"),
        identities=IDENTITIES,
        reason="acquired",
    ),
    "a reserved prefix is refused on CREATE too": Case(
        "CREATE",
        lease(B),
        None,
        BOB,
        identities=IDENTITIES,
        allowed=False,
        reason="prefix_reserved",
        code=403,
    ),
    # -- release --
    "the holder releases": Case(
        "UPDATE", with_holder(ALICE_HOLDS_A, ""), ALICE_HOLDS_A, reason="released"
    ),
    "a release by a different user is refused with 409": Case(
        "UPDATE",
        with_holder(ALICE_HOLDS_A, ""),
        ALICE_HOLDS_A,
        BOB,
        allowed=False,
        reason="release_not_holder",
        code=409,
        says=("user bob is not its holder and may not release it",),
    ),
    "a release after expiry is allowed to anyone": Case(
        "UPDATE", with_holder(A_EXPIRED, ""), A_EXPIRED, BOB, reason="released_expired"
    ),
    "the controller releases a live Lease": Case(
        "UPDATE",
        with_holder(ALICE_HOLDS_A, ""),
        ALICE_HOLDS_A,
        CONTROLLER,
        reason="released_by_controller",
    ),
    "a user of the holder's submitter releases": Case(
        "UPDATE",
        with_holder(ALICE_HOLDS_A, ""),
        ALICE_HOLDS_A,
        user("openapi-2"),
        reason="released",
        identities=IDENTITIES,
    ),
    "an unstamped Lease from before elb-gate may be released": Case(
        "UPDATE", with_holder(lease(A), ""), lease(A), BOB, reason="released_unstamped"
    ),
    "a write that leaves a free Lease free is allowed": Case("UPDATE", FREE, FREE, BOB),
    # -- delete --
    "deleting a live Lease is refused with 409": Case(
        "DELETE",
        None,
        ALICE_HOLDS_A,
        allowed=False,
        reason="delete_live",
        code=409,
        says=("never deleted", "clearing spec.holderIdentity"),
    ),
    "the namespace controller deletes a live Lease of a namespace being deleted": Case(
        "DELETE",
        None,
        ALICE_HOLDS_A,
        user("system:serviceaccount:kube-system:namespace-controller"),
        reason="namespace_deleted",
    ),
    "another service account of kube-system may not": Case(
        "DELETE",
        None,
        ALICE_HOLDS_A,
        user("system:serviceaccount:kube-system:generic-garbage-collector"),
        allowed=False,
        reason="delete_live",
        code=409,
    ),
    "deleting an expired Lease is allowed": Case("DELETE", None, A_EXPIRED),
    "deleting a free Lease is allowed": Case("DELETE", None, FREE),
    "a DELETE without oldObject fails closed": Case(
        "DELETE", None, None, allowed=False, reason="unverified", code=503
    ),
    "an UPDATE without oldObject is malformed": Case(
        "UPDATE", lease(A), None, stamped=False, allowed=False, reason="malformed", code=400
    ),
    # -- not ours --
    "a Lease that is not a submit Lease is not judged": Case(
        "DELETE", None, lease(A, name="kube-scheduler"), reason="not_gated"
    ),
}


def judge(case: Case) -> Any:
    name = None if case.new or case.old else LEASE
    request = admission(
        case.operation, case.new, case.old, who=case.who, resource="leases", name=name
    )
    if case.stamped and case.new is not None:
        stamp = lease_stamp.decide(LeaseRequest.from_admission(request), NOW)
        stamped = jsonpatch.apply_patch(case.new, list(stamp.patch))
        request = admission(case.operation, stamped, case.old, who=case.who, resource="leases")
    return lease_guard.decide(
        LeaseRequest.from_admission(request), SETTINGS.gate, SETTINGS.webhook, NOW, case.identities
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_lease_guard(case: Case) -> None:
    decision = judge(case)
    assert (decision.allowed, decision.reason, decision.code) == (
        case.allowed,
        case.reason,
        case.code,
    ), decision.message
    for phrase in case.says:
        assert phrase in decision.message
    if not decision.allowed:
        assert decision.message.startswith("Lease guard") and "\n" not in decision.message


def test_the_guard_judges_expiry_on_the_stored_renew_time_not_the_clients() -> None:
    # The client claims it renewed long ago (so A looks expired); the stored
    # state says A renewed a minute ago on the webhook's clock.
    claimed = with_holder(ALICE_HOLDS_A, B, renewTime=format_microtime(NOW - timedelta(hours=2)))
    decision = judge(Case("UPDATE", claimed, ALICE_HOLDS_A, BOB))
    assert decision.code == 409 and decision.reason == "takeover_live"
