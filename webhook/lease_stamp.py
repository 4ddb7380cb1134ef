"""Gate A's mutating stamp (webhook ``lease-stamp.elb-gate.io``). Pure; no I/O.

On every write to an ``elb-blast-submit-*`` Lease:

* holder changes (acquire, takeover): ``elb-gate.io/holder-user`` = requester,
  ``elb-gate.io/holder-pod`` = its pod (bound token) or removed,
  ``acquireTime`` and ``renewTime`` = the webhook's clock;
* holder unchanged (renew, or any other write while held): the stamps are
  carried over from ``oldObject`` — a full-object PUT from an existing client
  drops annotations it never knew about — and ``renewTime`` = the webhook's
  clock, so expiry is judged on one clock, never on the client's;
* released (holder ``""``): the stamps are removed.

A Lease held from before elb-gate was installed has no stamp: its first
renewer is stamped as its user (adoption), so a rollout does not break a
submit in flight. The validating guard decides whether that renewer may.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime

import jsonpatch

from elbgate.lease import LeaseView, format_microtime
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION, is_submit_lease_name
from webhook.decision import Decision, admit
from webhook.lease_request import LeaseRequest
from webhook.requester import Requester


@dataclass(frozen=True, slots=True)
class Stamps:
    """The ``holder-user``/``holder-pod`` annotations a write must end with
    (``""`` = annotation absent)."""

    user: str = ""
    pod: str = ""


def expected_stamps(old: LeaseView | None, new_holder: str, requester: Requester) -> Stamps:
    """What the stamps must be after a write that leaves ``new_holder`` in the Lease.
    Shared with the validating guard, which refuses a write that does not carry them."""
    if not new_holder:
        return Stamps()
    if old is not None and old.holder == new_holder and old.holder_user:
        return Stamps(old.holder_user, old.holder_pod)
    return Stamps(requester.username, requester.pod)


def decide(request: LeaseRequest, now: datetime) -> Decision:
    """The JSON Patch that stamps ``request`` (empty when nothing changes)."""
    if not is_submit_lease_name(request.name) or request.operation not in ("CREATE", "UPDATE"):
        return admit("not_gated")
    if request.obj is None or request.new is None:
        return admit("not_gated")
    holder = request.new.holder
    stamps = expected_stamps(request.old, holder, request.requester)
    desired = copy.deepcopy(dict(request.obj))
    meta = desired.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    for key, value in ((HOLDER_USER_ANNOTATION, stamps.user), (HOLDER_POD_ANNOTATION, stamps.pod)):
        if value:
            annotations[key] = value
        else:
            annotations.pop(key, None)
    if annotations or "annotations" in meta:
        meta["annotations"] = annotations
    changed_holder = request.old is None or request.old.holder != holder
    if holder:
        spec = desired.setdefault("spec", {})
        stamp_time = format_microtime(now)
        spec["renewTime"] = stamp_time
        if changed_holder:
            spec["acquireTime"] = stamp_time
    ops = jsonpatch.make_patch(dict(request.obj), desired).patch
    if not holder:
        reason = "released" if request.old is not None and request.old.held else "free"
    else:
        reason = "acquired" if changed_holder else "renewed"
    return Decision(
        True,
        reason,
        patch=tuple(ops),
        details={"holder": holder, "holder_user": stamps.user, "holder_pod": stamps.pod},
    )
