"""Builders for admission requests, Leases and settings, so tables read as sentences."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from elbgate.lease import format_microtime
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION
from elbgate.settings import Settings
from tests.protocol.builders import NOW, job
from webhook.review import AdmissionRequest, UserInfo

__all__ = ["NOW", "SETTINGS", "admission", "job", "job_object", "lease", "user"]

SETTINGS = Settings()
"""Defaults: ceiling 3, TTL 900 s, skew 30 s, durations 15..3600 s."""

LEASE = "elb-blast-submit-default"


def user(
    name: str = "alice",
    groups: tuple[str, ...] = (),
    pod: str = "",
    pod_uid: str = "",
) -> UserInfo:
    """A requester; ``pod``/``pod_uid`` make it a bound service-account token."""
    extra: dict[str, tuple[str, ...]] = {}
    if pod:
        extra["authentication.kubernetes.io/pod-name"] = (pod,)
    if pod_uid:
        extra["authentication.kubernetes.io/pod-uid"] = (pod_uid,)
    return UserInfo(username=name, groups=groups, extra=extra)


def admission(
    operation: str,
    obj: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    *,
    who: UserInfo | None = None,
    resource: str = "jobs",
    name: str | None = None,
    namespace: str = "default",
    dry_run: bool = False,
) -> AdmissionRequest:
    """An AdmissionRequest as the apiserver would send it."""
    source = obj if obj is not None else old
    if name is None:
        name = str(((source or {}).get("metadata") or {}).get("name") or "")
    return AdmissionRequest(
        uid="uid-1",
        operation=operation,
        namespace=namespace,
        name=name,
        resource=resource,
        sub_resource="",
        user=who or user(),
        obj=obj,
        old_object=old,
        dry_run=dry_run,
    )


def job_object(app: str | None, id: str | None = None, name: str = "") -> dict[str, Any]:
    """A Job body for a request (``app=None``: no labels at all)."""
    if app is None:
        return {"metadata": {"name": name or "plain", "namespace": "default"}}
    return job(app, id, name).build()


def lease(
    holder: str = "",
    *,
    holder_user: str = "",
    holder_pod: str = "",
    renewed_ago: float | None = 5.0,
    renew_raw: str | None = None,
    duration: int | None = 900,
    name: str = LEASE,
) -> dict[str, Any]:
    """A Lease dict; ``renewed_ago`` is measured on the webhook's clock (NOW)."""
    spec: dict[str, Any] = {"holderIdentity": holder}
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    if renew_raw is not None:
        spec["renewTime"] = renew_raw
    elif renewed_ago is not None:
        spec["renewTime"] = format_microtime(NOW - timedelta(seconds=renewed_ago))
        spec["acquireTime"] = spec["renewTime"]
    annotations = {}
    if holder_user:
        annotations[HOLDER_USER_ANNOTATION] = holder_user
    if holder_pod:
        annotations[HOLDER_POD_ANNOTATION] = holder_pod
    meta: dict[str, Any] = {"name": name, "namespace": "default", "resourceVersion": "7"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}
