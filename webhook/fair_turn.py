"""Fair turns in the Lease guard: which acquisitions the rule judges, and its answer in
words. Pure; the rule is :func:`elbgate.turns.judge`, the reads and the
compare-and-swap are in :mod:`webhook.admission`.

Only an acquisition the guard already admitted is judged (an UPDATE that puts a new
holder into a free or expired Lease, by a requester of a configured submitter, not a
split shard), so the rule can only add refusals: never a takeover of a live Lease.
A CREATE (no Lease yet) is not judged: the OpenAPI client reads only "already
exists" as busy on a create, and a namespace has no Lease only before its first
submit. A refusal is 409 Conflict, which both clients read as busy.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from elbgate.durations import format_moment
from elbgate.identities import SubmitterIdentities
from elbgate.turns import Judgement
from webhook.decision import Decision, refuse
from webhook.lease_request import LeaseRequest

JUDGED_REASONS = frozenset({"acquired", "taken_over"})
"""The guard's admits that put a new holder into a free or expired Lease."""


def path_of(
    request: LeaseRequest, decision: Decision, identities: SubmitterIdentities
) -> str | None:
    """The submit path whose acquisition the rule judges, or ``None`` when it does not."""
    if not decision.allowed or decision.reason not in JUDGED_REASONS:
        return None
    if request.operation != "UPDATE" or request.new is None:
        return None
    user = request.requester.username
    if identities.split_holder(request.new.holder, user) is not None:
        return None  # a split shard cannot wait (the dashboard never retries one)
    sub = identities.for_requester(user, request.requester.groups)
    return sub.name if sub is not None else None


def answer(
    request: LeaseRequest,
    decision: Decision,
    path: str,
    judged: Judgement,
    now: datetime,
    slots: tuple[int, int],
) -> Decision:
    """The guard's admit, or a refusal as busy, with the rule's facts in the log line.
    ``slots``: the active searches and the ceiling the rule judged on."""
    facts = {"turn": judged.reason, "path": path}
    if judged.allowed:
        return replace(decision, details={**decision.details, **facts})
    assert request.new is not None
    waited = format_moment(judged.waited_since or now, now)
    who = f"path `{path}` (user {request.requester.username})"
    if judged.favoured_since is None:
        active, ceiling = slots
        message = (
            f"Lease guard: no search slot is free in namespace {request.namespace} "
            f"({active}/{ceiling} active searches), so Lease {request.ref} stays free for "
            f"the submit that can use the next one; {who} is in line, waiting since "
            f"{waited}. Try again (fair turns, ELB_GATE_FAIR_TURNS)."
        )
    else:
        message = (
            f"Lease guard: Lease {request.ref} is free, but the next free turn is kept for "
            f"submit path `{judged.favoured}`, waiting since "
            f"{format_moment(judged.favoured_since, now)}; {who} has waited since {waited}. "
            "Try again: the turn after it is yours (fair turns, ELB_GATE_FAIR_TURNS)."
        )
    return refuse(
        409,
        "fair_turn",
        message,
        holder=request.new.holder,
        favoured=judged.favoured,
        **facts,
    )
