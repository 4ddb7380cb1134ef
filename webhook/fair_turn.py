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
    request: LeaseRequest, decision: Decision, path: str, judged: Judgement, now: datetime
) -> Decision:
    """The guard's admit, or a refusal as busy, with the rule's facts in the log line."""
    facts = {"turn": judged.reason, "path": path}
    if judged.allowed:
        return replace(decision, details={**decision.details, **facts})
    assert request.new is not None and judged.favoured_since is not None
    waited = judged.waited_since or now
    return refuse(
        409,
        "fair_turn",
        f"Lease guard: Lease {request.ref} is free, but the next free turn is kept for "
        f"submit path `{judged.favoured}`, waiting since "
        f"{format_moment(judged.favoured_since, now)}; "
        f"path `{path}` (user {request.requester.username}) has waited since "
        f"{format_moment(waited, now)}. Try again: the turn after it is yours "
        "(fair turns, ELB_GATE_FAIR_TURNS).",
        holder=request.new.holder,
        favoured=judged.favoured,
        **facts,
    )
