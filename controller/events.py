"""Kubernetes Events (core/v1) the controller records on the objects it acts on."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Literal

from controller.liveness import format_time

COMPONENT = "elb-gate-controller"

LEASE_EXPIRED_RECLAIMED = "LeaseExpiredReclaimed"
LEASE_HOLDER_GONE_RECLAIMED = "LeaseHolderGoneReclaimed"
ORPHANED_FINALIZER = "OrphanedFinalizer"
ORPHANED_FINALIZER_DELETED = "OrphanedFinalizerDeleted"

EventType = Literal["Normal", "Warning"]


def involved(
    api_version: str, kind: str, namespace: str, name: str, uid: str = "", rv: str = ""
) -> dict[str, str]:
    """An ``involvedObject`` reference."""
    ref = {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name}
    if uid:
        ref["uid"] = uid
    if rv:
        ref["resourceVersion"] = rv
    return ref


def event_body(
    obj_ref: dict[str, str],
    reason: str,
    message: str,
    event_type: EventType,
    instance: str,
    now: datetime,
) -> dict[str, Any]:
    """A core/v1 Event, named like client-go's recorder does (``<object>.<hex time>``)."""
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{obj_ref['name']}.{time.time_ns():x}",
            "namespace": obj_ref["namespace"],
        },
        "involvedObject": obj_ref,
        "reason": reason,
        "message": message[:1024],
        "type": event_type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
