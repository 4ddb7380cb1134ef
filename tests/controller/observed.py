"""What the controller's work looks like from the API: the submit Lease, Events, the
liveness ConfigMap, a Job's annotations (waiting until it has looked:
:func:`testbed.holders.settle`)."""

from __future__ import annotations

from typing import Any

from elbgate.names import LIVENESS_CONFIGMAP, lease_name
from testbed.controlplane import ControlPlane


def holder(cp: ControlPlane, namespace: str) -> str:
    """The submit Lease's holderIdentity (``""``: free or absent)."""
    lease = cp.admin.find("leases", namespace, lease_name(namespace))
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def events(cp: ControlPlane, namespace: str, reason: str) -> list[dict[str, Any]]:
    """Events of ``reason`` in ``namespace``, oldest first."""
    found = [e for e in cp.admin.list("events", namespace) if e.get("reason") == reason]
    return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))


def liveness(cp: ControlPlane, namespace: str) -> dict[str, str]:
    """The liveness ConfigMap's data (empty when absent)."""
    cm = cp.admin.find("configmaps", namespace, LIVENESS_CONFIGMAP)
    return dict((cm or {}).get("data") or {})


def job_annotations(cp: ControlPlane, namespace: str, job: str) -> dict[str, str]:
    return dict(cp.admin.get("jobs", namespace, job)["metadata"].get("annotations") or {})
