"""Gate A's mutating stamp (webhook ``lease-stamp.elb-gate.io``). Pure; no I/O.

On every write to an ``elb-blast-submit-*`` Lease:

* holder changes (acquire, takeover): ``elb-gate.io/holder-user`` = requester,
  ``elb-gate.io/holder-pod`` = its pod (bound token) or removed,
  ``acquireTime`` and ``renewTime`` = the webhook's clock;
* holder unchanged (renew, or any other write while held): the stamps are
  carried over from ``oldObject`` — a full-object PUT from an existing client
  drops annotations it never knew about — and ``renewTime`` = the webhook's
  clock, so expiry is judged on one clock, never on the client's. Both
  existing clients also reset ``acquireTime`` on every renew, on their own
  clocks: the stamped ``acquireTime`` of the stored Lease is carried over, so
  it stays the webhook's time of the acquisition;
* released (holder ``""``): the stamps are removed.

A Lease held from before elb-gate was installed has no stamp: its first
renewer is stamped as its user (adoption), so a rollout does not break a
submit in flight. The validating guard decides whether that renewer may.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
    changed_holder = request.old is None or request.old.holder != holder
    times: dict[str, str] = {}
    if holder:
        times["renewTime"] = format_microtime(now)
        if changed_holder:
            times["acquireTime"] = times["renewTime"]
        elif request.old is not None and request.old.holder_user:
            acquired = request.old.acquire_time
            if isinstance(acquired, datetime):
                times["acquireTime"] = format_microtime(acquired)
    ops = stamp_ops(request.obj, stamps, times)
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


def stamp_ops(
    obj: Mapping[str, Any], stamps: Stamps, times: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The JSON Patch that leaves ``stamps`` in ``obj``'s annotations and ``times``
    in its spec, and changes nothing else: one op per path that differs.

    Built directly rather than by diffing a modified deep copy: this is the
    stamp's whole cost otherwise (docs/benchmarks.md, finding 5).
    """
    ops: list[dict[str, Any]] = []
    wanted = ((HOLDER_USER_ANNOTATION, stamps.user), (HOLDER_POD_ANNOTATION, stamps.pod))
    if "metadata" not in obj:
        meta_value: dict[str, Any] = {}
        annotations = {key: value for key, value in wanted if value}
        if annotations:
            meta_value["annotations"] = annotations
        ops.append({"op": "add", "path": "/metadata", "value": meta_value})
    else:
        meta = obj["metadata"]
        if not isinstance(meta, Mapping):
            raise TypeError(f"Lease metadata is a {type(meta).__name__}, not an object")
        current = meta.get("annotations")
        if isinstance(current, Mapping):
            for key, value in wanted:
                path = _pointer("metadata", "annotations", key)
                if value:
                    ops += _set(path, key in current, current.get(key), value)
                elif key in current:
                    ops.append({"op": "remove", "path": path})
        else:  # absent, or null (or not an object): the stamps become the whole map
            annotations = dict(current or {})
            for key, value in wanted:
                if value:
                    annotations[key] = value
                else:
                    annotations.pop(key, None)
            if annotations or "annotations" in meta:
                ops += _set("/metadata/annotations", "annotations" in meta, current, annotations)
    if times:
        if "spec" not in obj:
            ops.append({"op": "add", "path": "/spec", "value": dict(times)})
        else:
            spec = obj["spec"]
            for field_name, value in times.items():
                path = _pointer("spec", field_name)
                ops += _set(path, field_name in spec, spec.get(field_name), value)
    return ops


def _pointer(*tokens: str) -> str:
    """A JSON Pointer (RFC 6901): in each token ``~`` becomes ``~0``, then ``/`` ``~1``."""
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in tokens)


def _set(path: str, present: bool, current: Any, value: Any) -> list[dict[str, Any]]:
    """The op that leaves ``value`` at ``path``: none when it is already there."""
    if not present:
        return [{"op": "add", "path": path, "value": value}]
    if current == value and type(current) is type(value):
        return []
    return [{"op": "replace", "path": path, "value": value}]
