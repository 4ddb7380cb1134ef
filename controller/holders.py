"""The holder-gone rule: is the process that holds a submit Lease gone? Pure.

Evidence comes from the holder's pod (named by the Lease's ``elb-gate.io/holder-pod`` stamp,
``<ns>/<pod>/<uid>``) and the node it runs on, as the controller's name-scoped watches see
them. The holder is gone when (docs/holder-gone.md gives the evidence for each case):

* ``pod_deleted``     — no pod of that name exists;
* ``pod_replaced``    — a pod of that name exists with another uid (it was recreated);
* ``pod_terminating`` — the pod has a ``deletionTimestamp``;
* ``pod_finished``    — the pod's phase is ``Succeeded`` or ``Failed``;
* ``container_restarted`` / ``containers_stopped`` — every container that may have held the
  Lease at its last renewal has since ended or (re)started;
* ``node_not_ready``  — the pod's node has not been Ready for the configured bound.

Only facts about *this* pod instance (its uid) are used, and each one is monotonic (a pod
never stops Terminating, leaves a terminal phase, or un-restarts), so a stale view can
only make the judgement late, never wrong — except "deleted" and "replaced", which the
reconciler confirms with a fresh GET before acting.

Container times (``startedAt``, ``finishedAt``) have whole-second resolution and come from
the node's clock, the renewal (``renewTime``) from the webhook's: every comparison below is
arranged so that this imprecision delays a judgement, never produces a false "gone".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from elbgate.durations import format_duration
from elbgate.lease import format_microtime, parse_microtime
from elbgate.names import HOLDER_CONTAINER_ANNOTATION

GoneReason = Literal[
    "pod_deleted",
    "pod_replaced",
    "pod_terminating",
    "pod_finished",
    "container_restarted",
    "containers_stopped",
    "node_not_ready",
]
GONE_REASONS: tuple[GoneReason, ...] = (
    "pod_deleted",
    "pod_replaced",
    "pod_terminating",
    "pod_finished",
    "container_restarted",
    "containers_stopped",
    "node_not_ready",
)


def _time(value: object) -> datetime | None:
    parsed = parse_microtime(value)
    return parsed if isinstance(parsed, datetime) else None


@dataclass(frozen=True, slots=True)
class ContainerView:
    """One entry of ``containerStatuses`` or ``initContainerStatuses``."""

    name: str
    init: bool
    restart_count: int
    running: bool
    started: datetime | None
    """``state.running.startedAt`` (running only)."""
    ended: datetime | None
    """When the instance before now ended: ``state.terminated.finishedAt``, or else
    ``lastState.terminated.finishedAt``; ``None`` when no instance has ended."""

    @classmethod
    def from_dict(cls, status: Mapping[str, Any], init: bool = False) -> ContainerView:
        state = status.get("state") or {}
        last = status.get("lastState") or {}
        running = state.get("running")
        terminated = state.get("terminated")
        ended = None
        if isinstance(terminated, Mapping):
            ended = _time(terminated.get("finishedAt"))
        elif isinstance(last.get("terminated"), Mapping):
            ended = _time(last["terminated"].get("finishedAt"))
        restarts = status.get("restartCount")
        return cls(
            name=str(status.get("name") or ""),
            init=init,
            restart_count=restarts if isinstance(restarts, int) else 0,
            running=isinstance(running, Mapping),
            started=_time(running.get("startedAt")) if isinstance(running, Mapping) else None,
            ended=ended,
        )


@dataclass(frozen=True, slots=True)
class PodView:
    """What the holder-gone rule reads from a Pod."""

    namespace: str
    name: str
    uid: str
    phase: str
    deleting_at: datetime | None
    """``deletionTimestamp``: when the kubelet will kill it (deletion time + grace)."""
    deletion_grace_seconds: int | None
    node_name: str
    holder_container: str
    """The pod's ``elb-gate.io/holder-container`` annotation (``""`` if absent)."""
    containers: tuple[ContainerView, ...]
    resource_version: str = ""

    @classmethod
    def from_dict(cls, pod: Mapping[str, Any]) -> PodView:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        annotations = meta.get("annotations") or {}
        grace = meta.get("deletionGracePeriodSeconds")
        containers = [
            ContainerView.from_dict(c, init=True)
            for c in status.get("initContainerStatuses") or ()
            if isinstance(c, Mapping)
        ] + [
            ContainerView.from_dict(c)
            for c in status.get("containerStatuses") or ()
            if isinstance(c, Mapping)
        ]
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            phase=str(status.get("phase") or ""),
            deleting_at=_time(meta.get("deletionTimestamp")),
            deletion_grace_seconds=grace if isinstance(grace, int) else None,
            node_name=str(spec.get("nodeName") or ""),
            holder_container=str(annotations.get(HOLDER_CONTAINER_ANNOTATION) or ""),
            containers=tuple(containers),
            resource_version=str(meta.get("resourceVersion") or ""),
        )


@dataclass(frozen=True, slots=True)
class NodeView:
    """A Node's Ready condition."""

    name: str
    ready: str
    """``True``, ``False``, ``Unknown``; ``""`` when the node reports no Ready condition."""
    since: datetime | None
    """The Ready condition's ``lastTransitionTime``."""

    @classmethod
    def from_dict(cls, node: Mapping[str, Any]) -> NodeView:
        meta = node.get("metadata") or {}
        for cond in (node.get("status") or {}).get("conditions") or ():
            if isinstance(cond, Mapping) and cond.get("type") == "Ready":
                return cls(
                    name=str(meta.get("name") or ""),
                    ready=str(cond.get("status") or ""),
                    since=_time(cond.get("lastTransitionTime")),
                )
        return cls(name=str(meta.get("name") or ""), ready="", since=None)


@dataclass(frozen=True, slots=True)
class PodSeen:
    """What the controller knows of a stamped holder pod."""

    state: Literal["present", "absent", "unknown"]
    uid: str = ""
    detail: str = ""
    """For ``unknown``: why (not watched yet, the error), for the log."""
    pod: PodView | None = None
    """The pod, when ``present`` and seen whole (a bare uid is enough for the uid rule)."""
    node: NodeView | None = None
    """Its node, when known (``None``: not watched yet, not readable, or unscheduled)."""

    @classmethod
    def of(cls, pod: PodView, node: NodeView | None = None) -> PodSeen:
        return cls("present", uid=pod.uid, pod=pod, node=node)


@dataclass(frozen=True, slots=True)
class Evidence:
    """Why the holder is gone, and since when (for the reclaim-latency metric)."""

    reason: GoneReason
    detail: str
    """What was seen, in words, for the Event and the log."""
    since: datetime | None
    """When the evidence became true, when the objects say so."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """The holder-gone verdict: ``gone`` evidence, or when to look again (or neither)."""

    gone: Evidence | None = None
    look_again_at: datetime | None = None
    """A bound that will be reached with no further event (a NotReady node's bound)."""


_ALIVE, _GONE, _NEVER = "alive", "gone", "never"


def _instance_fate(c: ContainerView, renewed: datetime) -> str:
    """Whether the instance of ``c`` that ran at the renewal is still running (``alive``),
    has ended since (``gone``), or ``c`` provably ran no instance then (``never``)."""
    whole = renewed.replace(microsecond=0)  # the second the renewal fell in
    if c.running:
        # startedAt is truncated to the second: a value > renewed proves a start after it.
        if c.started is None or c.started <= renewed:
            return _ALIVE
        if c.restart_count == 0:
            return _NEVER  # its first start came after the renewal
        if c.ended is not None and c.ended < whole:
            return _NEVER  # it was down at the renewal (ended in an earlier second)
        return _GONE
    if c.ended is None:
        return _NEVER  # never started (ContainerCreating, image pull)
    return _NEVER if c.ended < whole else _GONE


def _containers_evidence(pod: PodView, renewed: datetime, who: str) -> Evidence | None:
    named = [c for c in pod.containers if c.name == pod.holder_container]
    candidates: Iterable[ContainerView] = named or pod.containers
    fates = [(c, _instance_fate(c, renewed)) for c in candidates]
    if not fates or any(f == _ALIVE for _c, f in fates):
        return None  # a process that may hold the Lease still runs
    gone = [c for c, f in fates if f == _GONE]
    if not gone:
        return None  # nothing ran at the renewal: the clocks disagree; judge nothing
    at = f"after the Lease's last renewal at {format_microtime(renewed)}"
    restarted = [c for c in gone if c.running]
    names = ", ".join(f"{'init ' if c.init else ''}container {c.name!r}" for c in gone)
    scope = f"{who}: its {names}" if named else f"{who}: every container that may hold it ({names})"
    moments = [c.ended if c.ended is not None else c.started for c in gone]
    since = min((t for t in moments if t is not None), default=None)
    if restarted:
        counts = ", ".join(f"{c.name} restartCount {c.restart_count}" for c in restarted)
        return Evidence(
            "container_restarted",
            f"{scope} ended or restarted {at} ({counts}): the process that held it is gone",
            since,
        )
    return Evidence(
        "containers_stopped",
        f"{scope} stopped {at} and none runs: the process that held it is gone",
        since,
    )


def judge_holder(
    stamp: tuple[str, str, str],
    seen: PodSeen,
    renewed: datetime,
    now: datetime,
    node_not_ready_seconds: float,
) -> Judgement:
    """Is the holder named by ``stamp`` (``(ns, pod, uid)``) gone, given what was ``seen``
    and the Lease's last ``renewed`` time? ``unknown`` pods are never gone."""
    ns, name, uid = stamp
    who = f"pod {ns}/{name}"
    if seen.state == "unknown":
        return Judgement()
    if seen.state == "absent":
        return Judgement(Evidence("pod_deleted", f"{who} no longer exists", None))
    if seen.uid != uid:
        return Judgement(
            Evidence(
                "pod_replaced",
                f"{who} was recreated (uid {seen.uid}, the holder's was {uid})",
                None,
            )
        )
    pod = seen.pod
    if pod is None:
        return Judgement()
    if pod.deleting_at is not None:
        grace = pod.deletion_grace_seconds
        asked = pod.deleting_at - timedelta(seconds=grace) if grace is not None else None
        return Judgement(
            Evidence(
                "pod_terminating",
                f"{who} is Terminating (deletionTimestamp {format_microtime(pod.deleting_at)})",
                asked,
            )
        )
    if pod.phase in ("Succeeded", "Failed"):
        ended = max((c.ended for c in pod.containers if c.ended and not c.init), default=None)
        return Judgement(Evidence("pod_finished", f"{who} is {pod.phase}", ended))
    evidence = _containers_evidence(pod, renewed, who)
    if evidence is not None:
        return Judgement(evidence)
    node = seen.node
    if node is None or node.ready == "True" or node.since is None or not node.ready:
        return Judgement()
    # A renewal made while the node was already not Ready is a sign of life (a crashed
    # kubelet leaves its containers running): the bound counts from the later of the two.
    quiet_since = max(node.since, renewed)
    due = quiet_since + timedelta(seconds=node_not_ready_seconds)
    if now < due:
        return Judgement(look_again_at=due)
    return Judgement(
        Evidence(
            "node_not_ready",
            f"{who} runs on node {node.name}, Ready={node.ready} since "
            f"{format_microtime(node.since)}, and the Lease has not been renewed for "
            f"{format_duration(node_not_ready_seconds)} since then or since its last renewal",
            due,
        )
    )
