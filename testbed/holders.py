"""Submitters that hold the submit Lease on the control plane, ended each way the
holder-gone rule knows (docs/holder-gone.md), and the time from that evidence to the
controller's reclaim.

A holder here is what the in-cluster submit path is: a Pod of its own ServiceAccount
whose process acquires ``elb-blast-submit-<ns>`` with the ``elb-gate`` client through the
real webhook, so the Lease carries a real ``elb-gate.io/holder-pod`` stamp (the webhook
reads it from the Pod-bound token). Each case ends that holder one way and returns a
:class:`Reclaim`:

* the reclaim time is the API server's: the audit log's ``stageTimestamp`` of the
  controller's PATCH that cleared the holder (matched by the resourceVersion it was
  conditioned on, so a reclaim is attributed to exactly one holder);
* the evidence time is the case's own, as docs/holder-gone.md ("How fast") defines it:
  when the deletion was asked for, the container's ``finishedAt`` (whole seconds), the
  node's ``Ready`` ``lastTransitionTime`` (whole seconds) or the holder's last renewal.

Used by ``tests/holders`` (each case with its own assertions) and by
:mod:`bench.reclaim_latency` (the worst case of each at the default settings).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

from client.submit_lease import SubmitLease
from elbgate.kube.config import KubeConfig
from elbgate.lease import parse_microtime
from elbgate.names import HOLDER_CONTAINER_ANNOTATION, LIVENESS_CONFIGMAP, lease_name
from elbgate.settings import ControllerSettings, GateSettings, WebhookSettings
from testbed.api import JsonObj
from testbed.audit_log import read_audit, requests_to
from testbed.controller_process import CONTROLLER_USER, LEADER_LEASE, ControllerProcess
from testbed.controlplane import ControlPlane, PodIdentity
from testbed.kubelet_stand_in import (
    KUBELET,
    MANAGED,
    RESTART,
    RESTART_ONLY,
    RUN_SECONDS,
    STOP_SECONDS,
)
from testbed.waiting import wait_until

TARGET_SECONDS = 15.0
"""Evidence → reclaim, worst case at the default settings (issue: reclaim within 15 s)."""
EXPIRY_TARGET_SECONDS = 1.0
"""Expiry → reclaim: the controller's look-again timer fires at the expiry
(docs/holder-gone.md: 50 ms, then the patch)."""


def target_seconds(case: str) -> float:
    """The reclaim target of a case: at expiry, or on evidence."""
    return EXPIRY_TARGET_SECONDS if case == "expired" else TARGET_SECONDS


SUBMITTER_SA = "elb-openapi"
HOLDER_CONTAINER = "elb-openapi"
SIDECAR = "log-shipper"
NODE_LABEL = "elb-gate.io/test-node"
"""The label a holder's own Node carries, for the Pod's nodeSelector."""


def utc(value: object) -> datetime:
    """An API time (RFC 3339, any precision) as an aware datetime."""
    parsed = parse_microtime(value)
    if not isinstance(parsed, datetime):
        raise ValueError(f"not a time: {value!r}")
    return parsed


def now() -> datetime:
    return datetime.now(UTC)


# -- the submitter pod and its hold ---------------------------------------------------


def submitter_pod(
    cp: ControlPlane,
    namespace: str,
    name: str | None = None,
    *,
    containers: Sequence[str] = (HOLDER_CONTAINER,),
    annotations: Mapping[str, str] | None = None,
    restart_policy: str = "Always",
    node_selector: Mapping[str, str] | None = None,
) -> PodIdentity:
    """A Running submitter Pod (``containers``) on any node unless ``node_selector`` says
    which, and a token bound to it (:meth:`ControlPlane.pod_identity`)."""
    return cp.pod_identity(
        namespace,
        SUBMITTER_SA,
        pod=name,
        containers=containers,
        annotations=annotations,
        restart_policy=restart_policy,
        node_selector=node_selector or {},
    )


@dataclass
class Holder:
    """A submitter process holding the submit Lease (the ``elb-gate`` client's
    :class:`SubmitLease`), and every Lease version it wrote."""

    identity: PodIdentity
    lease: SubmitLease
    versions: set[str] = field(default_factory=set)
    """resourceVersions of the Lease as this holder wrote it (acquire, renewals)."""
    renewed: list[datetime] = field(default_factory=list)
    """renewTime of each of its writes, as the webhook stamped it."""

    @property
    def name(self) -> str:
        """Its ``holderIdentity``."""
        return self.lease.holder

    def _wrote(self) -> None:
        known = self.lease._known
        if known is not None:
            self.versions.add(str(known["metadata"]["resourceVersion"]))
            self.renewed.append(utc(known["spec"]["renewTime"]))

    def renew(self) -> None:
        """One renewal through the webhook (which stamps renewTime on its clock)."""
        self.lease.renew()
        self._wrote()

    def close(self) -> None:
        self.lease.close()


def acquire(
    cp: ControlPlane,
    identity: PodIdentity,
    *,
    ttl_seconds: int = GateSettings().lease_ttl_seconds,
    timeout: float = 60.0,
) -> Holder:
    """Acquire the submit Lease as ``identity``'s process, retrying while it is busy (a
    submit path waits for its slot the same way). ``ttl_seconds``: the Lease's duration."""
    lease = SubmitLease(
        identity.namespace,
        gate=GateSettings(lease_ttl_seconds=ttl_seconds),
        source="openapi",
        config=KubeConfig.load(identity.kubeconfig),
    )
    holder = Holder(identity, lease)
    try:
        wait_until(
            lambda: lease.acquire().acquired,
            timeout,
            f"{identity.pod} acquires the submit Lease",
            interval=0.05,
        )
    except BaseException:
        lease.close()
        raise
    holder._wrote()
    return holder


# -- what the API server recorded ---------------------------------------------------


class AuditLog:
    """The API server's audit log (every Job and Lease write), read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._events: list[JsonObj] = []
        self._lock = threading.Lock()

    def events(self) -> list[JsonObj]:
        """Every event so far (reads what was appended since the last call)."""
        with self._lock:
            fresh, self._offset = read_audit(self.path, self._offset)
            self._events.extend(fresh)
            return list(self._events)

    def clears_of(self, holder: Holder) -> list[JsonObj]:
        """The controller's successful writes that cleared ``holder`` from the submit
        Lease (conditioned on a version it wrote)."""
        ns = holder.identity.namespace
        patches = requests_to(
            self.events(), "leases", ns, lease_name(ns), user=CONTROLLER_USER, verbs=("patch",)
        )
        return [
            e
            for e in patches
            if (e.get("responseStatus") or {}).get("code") == 200
            and not ((e.get("responseObject") or {}).get("spec") or {}).get("holderIdentity")
            and str(((e.get("requestObject") or {}).get("metadata") or {}).get("resourceVersion"))
            in holder.versions
        ]

    def job_writes(self, namespace: str, name: str, user: str = CONTROLLER_USER) -> list[JsonObj]:
        """``user``'s successful writes to Job ``namespace/name``."""
        writes = requests_to(self.events(), "jobs", namespace, name, user=user)
        return [e for e in writes if (e.get("responseStatus") or {}).get("code", 0) < 300]


# -- a stage: the control plane, the controllers, the audit log ------------------------


@dataclass(frozen=True)
class Reclaim:
    """One holder's end and the controller's reclaim."""

    case: str
    namespace: str
    pod: str
    """The holder's pod (name)."""
    holder: str
    evidence: str
    """The controller's label for it (``pod_deleted``…, or ``expired``)."""
    evidence_at: datetime
    cleared_at: datetime
    """The API server's time of the PATCH that cleared the holder (audit stageTimestamp)."""
    by: str
    """The controller process (name) that reclaimed."""

    @property
    def seconds(self) -> float:
        return (self.cleared_at - self.evidence_at).total_seconds()


@dataclass
class Stage:
    """Where the cases run: the control plane, the controller replicas, the audit log."""

    cp: ControlPlane
    controllers: list[ControllerProcess]
    audit: AuditLog

    @classmethod
    def on(cls, cp: ControlPlane, controllers: Sequence[ControllerProcess]) -> Stage:
        return cls(cp, list(controllers), AuditLog(cp.audit_log))

    def leader(self, timeout: float = 60.0) -> ControllerProcess:
        """The replica that leads now (waiting for one)."""

        def one() -> ControllerProcess | None:
            return next((c for c in self.controllers if c.alive and c.is_leader()), None)

        return wait_until(one, timeout, "a leading controller", 0.1)

    def noticed(self, holder: Holder, timeout: float = 60.0) -> None:
        """Wait until the controller has reconciled the Lease as ``holder`` holds it (its
        liveness ConfigMap names the holder): from then on its pod is watched."""

        def named() -> bool:
            cm = self.cp.admin.find("configmaps", holder.identity.namespace, LIVENESS_CONFIGMAP)
            return bool(cm and (cm.get("data") or {}).get("leaseHolder") == holder.name)

        wait_until(named, timeout, f"the controller sees {holder.name} hold the Lease", 0.05)

    def settle(self, namespace: str) -> None:
        """Make the leader reconcile ``namespace`` twice more now (see :func:`settle`)."""
        settle(self.cp, self.leader(), namespace)

    def reclaim_of(
        self, holder: Holder, case: str, evidence_at: datetime, timeout: float = 120.0
    ) -> Reclaim:
        """Wait for the controller to clear ``holder``; the reclaim, timed."""
        event = wait_until(
            lambda: self.audit.clears_of(holder), timeout, f"{holder.name} reclaimed", 0.05
        )[0]
        ns = holder.identity.namespace

        def logged() -> tuple[ControllerProcess, dict[str, Any]] | None:
            ours = (r for r in self.reclaims_logged(ns) if r[1].get("holder") == holder.name)
            return next(ours, None)

        controller, line = wait_until(logged, 60, f"the reclaim of {holder.name} logged", 0.05)
        return Reclaim(
            case=case,
            namespace=ns,
            pod=holder.identity.pod,
            holder=holder.name,
            evidence=str(line.get("evidence") or line.get("reason")),
            evidence_at=evidence_at,
            cleared_at=utc(event["stageTimestamp"]),
            by=controller.name,
        )

    def reclaims_logged(self, namespace: str) -> list[tuple[ControllerProcess, dict[str, Any]]]:
        """Every reclaim any replica logged in ``namespace``: the replica, its log line."""
        return [
            (ctl, line)
            for ctl in self.controllers
            for line in ctl.logs("submit Lease reclaimed")
            if line.get("namespace") == namespace
        ]


class ControllerTiming(TypedDict):
    """Keyword arguments of :meth:`ControllerProcess.start` that set its timing."""

    resync_seconds: float
    leader_lease_seconds: float
    leader_renew_seconds: float


_SHIPPED = ControllerSettings()
AT_DEFAULTS: ControllerTiming = {
    "resync_seconds": _SHIPPED.resync_seconds,
    "leader_lease_seconds": _SHIPPED.leader_lease_seconds,
    "leader_renew_seconds": _SHIPPED.leader_renew_seconds,
}
"""The controller's shipped timing (``ELB_GATE_RESYNC_SECONDS``, the leader Lease), as
:class:`~elbgate.settings.ControllerSettings` defines it."""


def free_leader_lease(cp: ControlPlane) -> None:
    """Forget a leader Lease left by an earlier controller (one killed, not stopped), so
    the next one leads at once instead of waiting it out."""
    cp.admin.delete("leases", *LEADER_LEASE)


@contextmanager
def controllers(
    cp: ControlPlane,
    namespaces: Sequence[str],
    names: Sequence[str] = ("controller-0",),
    env: Mapping[str, str] | None = None,
) -> Iterator[Stage]:
    """Controller replicas at the default settings (``env`` adds to them) gating
    ``namespaces``, the first one leading; stopped on exit."""
    free_leader_lease(cp)
    stage = Stage.on(cp, [])
    try:
        for name in names:
            stage.controllers.append(
                ControllerProcess.start(
                    cp, name=name, namespaces=namespaces, env=env, **AT_DEFAULTS
                )
            )
        stage.leader()
        yield stage
    finally:
        for ctl in stage.controllers:  # with any a test added
            ctl.stop()


def reconciles(ctl: ControllerProcess) -> float:
    """Reconciles ``ctl`` has run so far (every namespace)."""
    return ctl.metric("elb_gate_reconcile_duration_seconds_count") or 0.0


def settle(cp: ControlPlane, ctl: ControllerProcess, namespace: str, rounds: int = 2) -> None:
    """Make ``ctl`` reconcile ``namespace`` ``rounds`` more times, now, and wait for it:
    each round touches the namespace's liveness ConfigMap (an annotation only; the
    controller watches it) and waits for the reconcile count to move past it. What the
    controller decides about the namespace as it stands, it has decided afterwards,
    without waiting for a resync."""
    for i in range(rounds):
        wait_until(
            lambda: cp.admin.find("configmaps", namespace, LIVENESS_CONFIGMAP),
            60,
            f"the liveness ConfigMap of {namespace}",
            0.05,
        )
        seen = reconciles(ctl)
        poke = {"test.elb-gate.io/poke": f"{uuid.uuid4().hex[:8]}-{i}"}
        cp.admin.patch(
            "configmaps", namespace, LIVENESS_CONFIGMAP, {"metadata": {"annotations": poke}}
        )
        moved = lambda: reconciles(ctl) > seen  # noqa: B023, E731 (awaited in this round)
        wait_until(moved, 60, f"a reconcile of {namespace}", 0.05)


# -- ending a holder, each way --------------------------------------------------------


def pod(cp: ControlPlane, identity: PodIdentity) -> JsonObj:
    return cp.admin.get("pods", identity.namespace, identity.pod)


def container_status(pod_obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for status in (pod_obj.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") == name:
            return dict(status)
    raise KeyError(f"no status of container {name!r}")


def past_the_second_of(moment: datetime) -> None:
    """Sleep until the wall clock is in a later whole second than ``moment``: container
    times have whole-second resolution, and a restart in the very second of the last
    renewal is one the rule cannot tell from no restart (docs/holder-gone.md)."""
    next_second = moment.replace(microsecond=0).timestamp() + 1.0
    time.sleep(max(0.0, next_second + 0.01 - time.time()))


def crash(cp: ControlPlane, identity: PodIdentity, containers: Sequence[str] | None = None) -> None:
    """Crash the pod's containers (``containers``: only those) once, now."""
    annotations: dict[str, str | None] = {RESTART: uuid.uuid4().hex[:8]}
    annotations[RESTART_ONLY] = ",".join(containers) if containers else None
    cp.admin.patch(
        "pods", identity.namespace, identity.pod, {"metadata": {"annotations": annotations}}
    )


def restarted(cp: ControlPlane, identity: PodIdentity, container: str) -> JsonObj:
    """Wait until ``container`` has restarted; the pod then."""

    def done() -> JsonObj | None:
        obj = pod(cp, identity)
        return obj if container_status(obj, container).get("restartCount", 0) else None

    return wait_until(done, 60, f"{identity.pod}/{container} restarted", 0.05)


@contextmanager
def held(
    stage: Stage, namespace: str, ttl_seconds: int = GateSettings().lease_ttl_seconds, **pod: Any
) -> Iterator[Holder]:
    """A submitter Pod (:func:`submitter_pod` with ``pod``) holding the submit Lease,
    watched by the controller; its client closed afterwards."""
    holder = acquire(stage.cp, submitter_pod(stage.cp, namespace, **pod), ttl_seconds=ttl_seconds)
    try:
        stage.noticed(holder)
        yield holder
    finally:
        holder.close()


def force_deleted(
    stage: Stage, namespace: str, while_held: Callable[[Holder], None] | None = None
) -> Reclaim:
    """``kubectl delete pod --grace-period=0 --force``: the pod is gone at once.
    ``while_held``: called once the controller watches the holder, before its pod goes
    (what must be seen while the holder and the watches of its pod and node live)."""
    with held(stage, namespace) as holder:
        if while_held is not None:
            while_held(holder)
        asked = now()
        stage.cp.admin.delete("pods", namespace, holder.identity.pod, grace_seconds=0)
        return stage.reclaim_of(holder, "pod_deleted", asked)


def deleted_with_grace(stage: Stage, namespace: str, grace: int = 30) -> tuple[Reclaim, JsonObj]:
    """A pod deleted with a ``grace`` s grace period whose process takes longer than that
    to stop: Terminating for the whole grace. The reclaim, and the pod as it was then."""
    with held(stage, namespace, annotations={STOP_SECONDS: str(grace * 4)}) as holder:
        asked = now()
        stage.cp.admin.delete("pods", namespace, holder.identity.pod, grace_seconds=grace)
        reclaim = stage.reclaim_of(holder, "pod_terminating", asked)
        return reclaim, pod(stage.cp, holder.identity)


def container_restarted(stage: Stage, namespace: str) -> Reclaim:
    """The holder's only container crashes and restarts (restartPolicy Always): same pod,
    same uid, restartCount + 1. Timed from ``lastState.terminated.finishedAt``."""
    return _restarted(stage, namespace, "container_restarted", None)


def holder_container_restarted(stage: Stage, namespace: str) -> Reclaim:
    """A holder pod with a sidecar, annotated ``elb-gate.io/holder-container``: its
    holder container alone restarts."""
    return _restarted(
        stage,
        namespace,
        "holder_container_restarted",
        [HOLDER_CONTAINER],
        containers=(HOLDER_CONTAINER, SIDECAR),
        annotations={HOLDER_CONTAINER_ANNOTATION: HOLDER_CONTAINER},
    )


def _restarted(
    stage: Stage, namespace: str, case: str, only: Sequence[str] | None, **pod: Any
) -> Reclaim:
    with held(stage, namespace, **pod) as holder:
        past_the_second_of(holder.renewed[-1])
        crash(stage.cp, holder.identity, only)
        after = restarted(stage.cp, holder.identity, HOLDER_CONTAINER)
        ended = container_status(after, HOLDER_CONTAINER)["lastState"]["terminated"]["finishedAt"]
        return stage.reclaim_of(holder, case, utc(ended))


def _finished(stage: Stage, identity: PodIdentity, phase: str) -> datetime:
    def done() -> JsonObj | None:
        obj = pod(stage.cp, identity)
        return obj if obj["status"].get("phase") == phase else None

    obj = wait_until(done, 120, f"{identity.pod} {phase}", 0.05)
    return utc(container_status(obj, HOLDER_CONTAINER)["state"]["terminated"]["finishedAt"])


def lease_expired(
    stage: Stage, namespace: str, ttl_seconds: int = WebhookSettings().lease_min_duration_seconds
) -> Reclaim:
    """The submit thread died while its pod lives on: no renewal, no release, the pod and
    its container run on. Reclaimed at the Lease's expiry (renewTime + ``ttl_seconds`` +
    the shipped clock skew, on the controller's own timer), timed from that expiry; the
    Lease duration is by default the shortest the shipped webhook accepts."""
    with held(stage, namespace, ttl_seconds) as holder:
        skew = timedelta(seconds=GateSettings().clock_skew_seconds)
        expiry = holder.renewed[-1] + timedelta(seconds=ttl_seconds) + skew
        return stage.reclaim_of(holder, "expired", expiry)


def pod_failed(stage: Stage, namespace: str) -> Reclaim:
    """restartPolicy Never and the container crashes: the pod is Failed."""
    with held(stage, namespace, restart_policy="Never") as holder:
        crash(stage.cp, holder.identity)
        failed = _finished(stage, holder.identity, "Failed")
        return stage.reclaim_of(holder, "pod_failed", failed)


def pod_succeeded(stage: Stage, namespace: str) -> Reclaim:
    """The process exits 0 without releasing (restartPolicy Never), 8 s on: Succeeded."""
    run = {RUN_SECONDS: "8.0"}
    with held(stage, namespace, restart_policy="Never", annotations=run) as holder:
        succeeded = _finished(stage, holder.identity, "Succeeded")
        return stage.reclaim_of(holder, "pod_succeeded", succeeded)


@contextmanager
def own_node(cp: ControlPlane) -> Iterator[str]:
    """A Node of its own (driven by the kubelet stand-in), deleted afterwards with
    whatever runs on it."""
    name = f"holder-node-{uuid.uuid4().hex[:6]}"
    capacity = {"cpu": "2", "memory": "4Gi", "pods": "10"}
    cp.admin.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {MANAGED: "true", "kubernetes.io/hostname": name, NODE_LABEL: name},
            },
            "status": {"capacity": capacity, "allocatable": capacity},
        }
    )
    try:
        wait_until(lambda: node_ready(cp, name)[0] == "True", 60, f"node {name} Ready", 0.1)
        yield name
    finally:
        for obj in cp.admin.list("pods", field_selector=f"spec.nodeName={name}"):
            meta = obj["metadata"]
            cp.admin.delete("pods", meta["namespace"], meta["name"], grace_seconds=0)
        cp.admin.delete("nodes", None, name)


def node_ready(cp: ControlPlane, name: str) -> tuple[str, datetime | None]:
    """The node's Ready status and its lastTransitionTime."""
    node = cp.admin.get("nodes", None, name)
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return str(cond.get("status")), utc(cond["lastTransitionTime"])
    return "", None


def node_not_ready(cp: ControlPlane, name: str) -> datetime:
    """The node's kubelet reports Ready=False; when the transition was recorded."""
    cp.admin.patch("nodes", None, name, {"metadata": {"annotations": {KUBELET: "not-ready"}}})

    def transitioned() -> datetime | None:
        status, since = node_ready(cp, name)
        return since if status == "False" else None

    return wait_until(transitioned, 60, f"node {name} NotReady", 0.05)


def node_went_not_ready(stage: Stage, namespace: str) -> Reclaim:
    """The holder's node stops being Ready: timed from the Ready transition."""
    with own_node(stage.cp) as node, held(stage, namespace, node_selector={NODE_LABEL: node}) as h:
        return stage.reclaim_of(h, "node_not_ready", node_not_ready(stage.cp, node))


def node_not_ready_while_renewing(
    stage: Stage, namespace: str, renewals: int = 3, every: float = 2.0
) -> Reclaim:
    """The holder's node stops being Ready but the holder keeps renewing for a while
    (a kubelet that died leaves its containers running): timed from its last renewal."""
    with own_node(stage.cp) as node, held(stage, namespace, node_selector={NODE_LABEL: node}) as h:
        node_not_ready(stage.cp, node)
        for _ in range(renewals):
            time.sleep(every)
            h.renew()
        return stage.reclaim_of(h, "node_not_ready_renewing", h.renewed[-1])


Case = Callable[[Stage, str], Reclaim]
CASES: dict[str, Case] = {
    "pod_deleted": force_deleted,
    "pod_terminating": lambda stage, ns: deleted_with_grace(stage, ns)[0],
    "container_restarted": container_restarted,
    "holder_container_restarted": holder_container_restarted,
    "pod_failed": pod_failed,
    "pod_succeeded": pod_succeeded,
    "node_not_ready": node_went_not_ready,
    "node_not_ready_renewing": node_not_ready_while_renewing,
    "expired": lease_expired,
}
"""The cases a controller at the default settings reclaims (each in a namespace of its
own, which the controller gates): on evidence that the holder is gone, and at expiry."""
