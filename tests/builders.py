"""Builders for the table tests' Jobs, Leases and admission requests, so tables read as
sentences. Times are relative to :data:`NOW`, the test bed's one reference instant
(``testbed.elastic_blast.REFERENCE_TIME``, which the template-shaped bodies use too)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from elbgate.lease import format_microtime
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION
from elbgate.settings import Settings
from testbed.elastic_blast import REFERENCE_TIME as NOW
from testbed.elastic_blast import ts
from webhook.review import AdmissionRequest, UserInfo

__all__ = [
    "LEASE",
    "NOW",
    "SETTINGS",
    "JobBuilder",
    "admission",
    "job",
    "job_object",
    "lease",
    "ts",
    "user",
]

SETTINGS = Settings()
"""Defaults: ceiling 3, TTL 900 s, skew 30 s, durations 15..3600 s."""

LEASE = "elb-blast-submit-default"


# -- Jobs --------------------------------------------------------------------------------


@dataclass
class JobBuilder:
    app: str
    id: str | None
    name: str = ""
    age: float | None = 10.0
    status: dict[str, Any] = field(default_factory=dict)
    created_raw: str | None = None

    def complete(self) -> JobBuilder:
        self.status = {"succeeded": 1, "completionTime": ts(1)}
        return self

    def failed_but_retrying(self) -> JobBuilder:
        self.status = {"failed": 2}
        return self

    def failed_condition(self) -> JobBuilder:
        self.status = {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}
        return self

    def with_status(self, **status: Any) -> JobBuilder:
        self.status = status
        return self

    def created(self, raw: str) -> JobBuilder:
        self.created_raw = raw
        return self

    def aged(self, seconds: float | None) -> JobBuilder:
        self.age = seconds
        return self

    def build(self) -> dict[str, Any]:
        labels = {"app": self.app}
        if self.id is not None:
            labels["elb-job-id"] = self.id
        name = self.name or f"{self.app}-{self.id or 'x'}"
        meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels}
        if self.created_raw is not None:
            meta["creationTimestamp"] = self.created_raw
        elif self.age is not None:
            meta["creationTimestamp"] = ts(self.age)
        return {"metadata": meta, "status": self.status}


def job(app: str, id: str | None = None, name: str = "") -> JobBuilder:
    return JobBuilder(app=app, id=id, name=name)


def job_object(app: str | None, id: str | None = None, name: str = "") -> dict[str, Any]:
    """A Job body for a request (``app=None``: no labels at all)."""
    if app is None:
        return {"metadata": {"name": name or "plain", "namespace": "default"}}
    return job(app, id, name).build()


# -- Leases ------------------------------------------------------------------------------


def lease(
    holder: str = "",
    *,
    holder_user: str = "",
    holder_pod: str = "",
    annotations: dict[str, str] | None = None,
    renewed_ago: float | None = 5.0,
    renew_raw: str | None = None,
    duration: int | None = 900,
    name: str = LEASE,
    namespace: str = "default",
    rv: str = "7",
) -> dict[str, Any]:
    """A submit Lease as the API returns it; ``renewed_ago`` is measured on the webhook's
    clock (NOW)."""
    spec: dict[str, Any] = {"holderIdentity": holder}
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    if renew_raw is not None:
        spec["renewTime"] = renew_raw
    elif renewed_ago is not None:
        spec["renewTime"] = format_microtime(NOW - timedelta(seconds=renewed_ago))
        spec["acquireTime"] = spec["renewTime"]
    notes = dict(annotations or {})
    if holder_user:
        notes[HOLDER_USER_ANNOTATION] = holder_user
    if holder_pod:
        notes[HOLDER_POD_ANNOTATION] = holder_pod
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": rv}
    if notes:
        meta["annotations"] = notes
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


# -- admission requests ------------------------------------------------------------------


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
