"""Builders for the table tests' Jobs, Leases, admission requests, holder Pods and their
Nodes, and the controller's cache snapshots, so tables read as sentences. Times are
relative to :data:`NOW`, the test bed's one reference instant
(``testbed.elastic_blast.REFERENCE_TIME``, which the template-shaped bodies use too)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from controller.cache import ConfigMapRecord, Snapshot
from controller.liveness import format_time
from elbgate.census import JobRef, is_terminal
from elbgate.lease import LeaseView, format_microtime
from elbgate.names import (
    BATCH_WORK_EVIDENCE_APPS,
    BATCH_WORK_SEEN_ANNOTATION,
    HOLDER_POD_ANNOTATION,
    HOLDER_USER_ANNOTATION,
    ORPHANED_SINCE_ANNOTATION,
    lease_name,
)
from elbgate.settings import ControllerSettings, GateSettings, Settings
from testbed.elastic_blast import REFERENCE_TIME as NOW
from testbed.elastic_blast import ts
from webhook.review import API_VERSION, KIND, AdmissionRequest, UserInfo

__all__ = [
    "LEASE",
    "NOW",
    "SETTINGS",
    "JobBuilder",
    "admission",
    "job",
    "job_object",
    "lease",
    "review",
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


KINDS = {"jobs": ("batch", "Job"), "leases": ("coordination.k8s.io", "Lease")}
"""The group and kind of each resource elb-gate judges (all at version v1)."""


def review(request: AdmissionRequest | Mapping[str, Any]) -> dict[str, Any]:
    """The AdmissionReview the API server POSTs: an :class:`AdmissionRequest` written out
    in full as the API server writes one, or a raw ``request`` as it is given."""
    if isinstance(request, AdmissionRequest):
        who, (group, kind) = request.user, KINDS[request.resource]
        gvk = {"group": group, "version": "v1", "kind": kind}
        gvr = {"group": group, "version": "v1", "resource": request.resource}
        options = f"{request.operation.title()}Options"
        request = {
            "uid": request.uid,
            "kind": gvk,
            "resource": gvr,
            **({"subResource": request.sub_resource} if request.sub_resource else {}),
            "requestKind": gvk,
            "requestResource": gvr,
            "name": request.name,
            "namespace": request.namespace,
            "operation": request.operation,
            "userInfo": {
                "username": who.username,
                **({"uid": who.uid} if who.uid else {}),
                "groups": list(who.groups),
                "extra": {key: list(values) for key, values in who.extra.items()},
            },
            "object": request.obj,
            "oldObject": request.old_object,
            "dryRun": request.dry_run,
            "options": {"kind": options, "apiVersion": "meta.k8s.io/v1"},
        }
    return {"apiVersion": API_VERSION, "kind": KIND, "request": dict(request)}


# -- the controller's tables: Leases, Jobs and cache snapshots --------------------------

NS = "blast"
HOLDER = "dashboard-0b9f6c1e2d3a4b5c8d7e6f5a4b3c2d1e"
POD_UID = "11111111-2222-3333-4444-555555555555"
STAMP = f"{NS}/celery-worker-0/{POD_UID}"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def sections(**overrides: Any) -> tuple[GateSettings, ControllerSettings]:
    """The sections the planner takes, as shipped but for ``overrides`` (field names)."""
    shipped = Settings.of(**overrides)
    return shipped.gate, shipped.controller


def lease_doc(
    holder: str = HOLDER,
    renewed_ago: float | None = 10,
    renew_time: str | None = None,
    duration: int | None = 900,
    pod: str | None = None,
    user: str | None = "dashboard",
    rv: str = "41",
    namespace: str = NS,
) -> dict[str, Any]:
    """A submit Lease as the API returns it (:func:`lease` with the controller tables'
    defaults)."""
    return lease(
        holder,
        holder_user=user or "",
        holder_pod=pod or "",
        renewed_ago=renewed_ago,
        renew_raw=renew_time,
        duration=duration,
        name=lease_name(namespace),
        namespace=namespace,
        rv=rv,
    )


def lease_view(**kw: Any) -> LeaseView:
    return LeaseView.from_dict(lease_doc(**kw))


def job_doc(
    name: str,
    app: str = "finalizer",
    job_id: str | None = "s1",
    age: float | None = 600,
    finished: bool = False,
    orphaned_since: str | datetime | None = None,
    rv: str = "7",
    namespace: str = NS,
    batch_work_seen: str | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job as the API returns it (only the fields anyone reads)."""
    labels = {"app": app}
    if job_id:
        labels["elb-job-id"] = job_id
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "labels": labels,
    }
    if age is not None:
        meta["creationTimestamp"] = format_time(ago(age))
    if orphaned_since is not None:
        since = (
            format_microtime(orphaned_since)
            if isinstance(orphaned_since, datetime)
            else orphaned_since
        )
        meta["annotations"] = {ORPHANED_SINCE_ANNOTATION: since}
    if batch_work_seen is not None:
        meta.setdefault("annotations", {})[BATCH_WORK_SEEN_ANNOTATION] = batch_work_seen
    status: dict[str, Any] = {"active": 1}
    if finished:
        status = {"succeeded": 1, "completionTime": format_time(NOW)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "status": status}


def snapshot(
    lease: LeaseView | None = None,
    jobs: Iterable[Mapping[str, Any]] = (),
    liveness: Mapping[str, str] | None = None,
    liveness_rv: str = "90",
    namespace: str = NS,
) -> Snapshot:
    """What the cache would hold after seeing ``jobs`` (finished ones kept only if marked;
    of finished batch Jobs only their search ids)."""
    unfinished: list[JobRef] = []
    finished_marked: list[JobRef] = []
    batch_work: set[str] = set()
    seen: dict[str, str] = {}
    for doc in jobs:
        ref = JobRef.from_dict(doc)
        if ref.app in BATCH_WORK_EVIDENCE_APPS and ref.job_id:
            if is_terminal(doc):
                seen.setdefault(ref.job_id, f"{ref.app}/{ref.name}")
            else:
                seen[ref.job_id] = f"{ref.app}/{ref.name}"  # a running Job names it best
        if not is_terminal(doc):
            unfinished.append(ref)
            continue
        if ref.orphaned_since:
            finished_marked.append(ref)
        if ref.app in BATCH_WORK_EVIDENCE_APPS and ref.job_id:
            batch_work.add(ref.job_id)
    record = None
    if liveness is not None:
        record = ConfigMapRecord("elb-blast-liveness", liveness_rv, dict(liveness))
    return Snapshot(
        namespace,
        lease,
        tuple(unfinished),
        tuple(finished_marked),
        record,
        frozenset(batch_work),
        seen,
    )


# -- holder pods and their nodes ------------------------------------------------------------

RENEWED = NOW - timedelta(seconds=19.75)
"""The Lease's last renewal in the holder tables: 11:59:40.25, inside a second, because
container times have whole-second resolution."""
NODE = "aks-nodepool1-38561124-vmss000002"


def kube_time(moment: datetime) -> str:
    """metav1.Time as the API writes it: whole seconds (container and condition times)."""
    return format_time(moment)


def running(
    name: str = "elb-openapi",
    since: datetime | None = None,
    restarts: int = 0,
    last_ended: datetime | None = None,
) -> dict[str, Any]:
    """A containerStatuses entry for a running container (``lastState`` when restarted)."""
    status: dict[str, Any] = {
        "name": name,
        "image": "elbacr.azurecr.io/elb-openapi:4.27",
        "imageID": "elbacr.azurecr.io/elb-openapi@sha256:c2399f43",
        "containerID": f"containerd://{name}-{restarts}",
        "ready": True,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": kube_time(since or RENEWED - timedelta(hours=2))}},
        "lastState": _ended(last_ended, 137, timedelta(minutes=30)),
    }
    return status


def waiting(
    name: str = "elb-openapi", restarts: int = 1, last_ended: datetime | None = None
) -> dict[str, Any]:
    """A container waiting to (re)start: CrashLoopBackOff after a crash, or never started."""
    status: dict[str, Any] = {
        "name": name,
        "image": "elbacr.azurecr.io/elb-openapi:4.27",
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff" if last_ended else "ContainerCreating"}},
        "lastState": _ended(last_ended, 1, timedelta(minutes=5)),
    }
    return status


def terminated(name: str = "elb-openapi", ended: datetime = NOW, code: int = 1) -> dict[str, Any]:
    """A container that ended and will not be restarted (restartPolicy Never)."""
    return {
        "name": name,
        "image": "elbacr.azurecr.io/elb-openapi:4.27",
        "imageID": "elbacr.azurecr.io/elb-openapi@sha256:c2399f43",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": _ended(ended, code, timedelta(minutes=10)),
        "lastState": {},
    }


def _ended(at: datetime | None, code: int, ran: timedelta) -> dict[str, Any]:
    """A container state ``terminated`` at ``at`` with ``code`` after running ``ran``
    (``{}``, no state, without ``at``)."""
    if at is None:
        return {}
    reason = "Completed" if code == 0 else "Error"
    times = {"startedAt": kube_time(at - ran), "finishedAt": kube_time(at)}
    return {"terminated": {"exitCode": code, "reason": reason, **times}}


def pod_doc(
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    *,
    name: str = "celery-worker-0",
    namespace: str = NS,
    uid: str = POD_UID,
    phase: str = "Running",
    node: str | None = NODE,
    deleting: datetime | None = None,
    grace: int = 30,
    holder_container: str | None = None,
) -> dict[str, Any]:
    """A Pod as the API returns it, with the status the kubelet writes."""
    statuses = containers if containers is not None else [running()]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": "5121",
        "creationTimestamp": kube_time(RENEWED - timedelta(hours=3)),
        "labels": {"app": "elb-openapi"},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "elb-openapi-7c9d8f"}
        ],
    }
    if holder_container is not None:
        meta["annotations"] = {"elb-gate.io/holder-container": holder_container}
    if deleting is not None:
        meta["deletionTimestamp"] = kube_time(deleting)
        meta["deletionGracePeriodSeconds"] = grace
    spec: dict[str, Any] = {
        "serviceAccountName": "elb-openapi-sa",
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": s["name"], "image": s["image"]} for s in statuses],
    }
    if init:
        spec["initContainers"] = [{"name": s["name"], "image": s["image"]} for s in init]
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": statuses,
    }
    if init:
        status["initContainerStatuses"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def node_doc(
    name: str = NODE, ready: str = "True", since: datetime | None = None
) -> dict[str, Any]:
    """A Node with the conditions the kubelet and the node lifecycle controller write."""
    reason = {
        "True": "KubeletReady",
        "False": "KubeletNotReady",
        "Unknown": "NodeStatusUnknown",
    }[ready]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "880", "labels": {"agentpool": "nodepool1"}},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": reason,
                    "lastHeartbeatTime": kube_time(NOW),
                    "lastTransitionTime": kube_time(since or NOW - timedelta(days=3)),
                },
            ]
        },
    }
