"""Name-scoped watches of the holder pods named by live Lease stamps, and of their nodes.

The controller never watches every Pod (or every Node) in the cluster: for each gated
namespace whose submit Lease is held with an ``elb-gate.io/holder-pod`` stamp, it runs one
LIST+WATCH of ``pods`` in the stamp's namespace with ``fieldSelector=metadata.name=<pod>``,
and one of ``nodes`` with ``fieldSelector=metadata.name=<node>`` for the node that pod runs
on. A watch starts when a reconcile first sees the stamp and stops when no live stamp names
its pod (no pod watched sits on its node), so at most one pod and one node per gated
namespace are watched, and every change to them wakes that namespace's reconcile at once:
a reclaim follows the evidence, not the resync.

What a watch has not listed yet is *unknown* (never "gone"). A node that cannot be read
(RBAC not granted) leaves only the NotReady case to the Lease TTL; every other case still
works (docs/holder-gone.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.holders import NodeView, PodSeen, PodView
from controller.metrics import ControllerMetrics
from elbgate.kube.api import PODS, KubeApi, path
from elbgate.kube.informer import Informer, WatchSpec
from elbgate.logs import log

logger = logging.getLogger("controller.holder_watch")

NODES = ("v1", "nodes")
"""Cluster-scoped: read only through a name-scoped watch (manifests/base/rbac.yaml)."""
POD_KIND = "pods"
NODE_KIND = "nodes"
NODE_BACKOFF_MAX_SECONDS = 30.0
"""A node watch that keeps failing (e.g. RBAC for nodes not granted) retries slowly."""

PodKey = tuple[str, str]
"""(namespace, name) of a holder pod."""


@dataclass(slots=True)
class _Record:
    """One watched pod or node: ``synced`` once listed; its view ``None`` when it does not
    exist."""

    synced: bool = False
    pod: PodView | None = None
    node: NodeView | None = None


class _PodSink:
    """The informer sink of one holder pod's watch."""

    def __init__(self, owner: HolderWatches, key: PodKey) -> None:
        self.owner, self.key = owner, key

    def replace(self, kind: str, namespace: str, items: Iterable[Mapping[str, Any]]) -> None:
        found = [PodView.from_dict(o) for o in items]
        self.owner._pod_seen(self.key, found[0] if found else None)

    def apply(self, kind: str, namespace: str, event_type: str, obj: Mapping[str, Any]) -> None:
        self.owner._pod_seen(self.key, None if event_type == "DELETED" else PodView.from_dict(obj))

    def mark_unsynced(self, kind: str, namespace: str) -> None:
        self.owner._pod_unsynced(self.key)


class _NodeSink:
    """The informer sink of one node's watch."""

    def __init__(self, owner: HolderWatches, name: str) -> None:
        self.owner, self.name = owner, name

    def replace(self, kind: str, namespace: str, items: Iterable[Mapping[str, Any]]) -> None:
        found = [NodeView.from_dict(o) for o in items]
        self.owner._node_seen(self.name, found[0] if found else None)

    def apply(self, kind: str, namespace: str, event_type: str, obj: Mapping[str, Any]) -> None:
        self.owner._node_seen(
            self.name, None if event_type == "DELETED" else NodeView.from_dict(obj)
        )

    def mark_unsynced(self, kind: str, namespace: str) -> None:
        self.owner._node_unsynced(self.name)


def pod_watch(namespace: str, name: str) -> WatchSpec:
    """The watch of one holder pod: its namespace, its name, nothing else."""
    return WatchSpec(
        POD_KIND, namespace, path(PODS, namespace), field_selector=f"metadata.name={name}"
    )


def node_watch(name: str) -> WatchSpec:
    """The watch of one node, by name."""
    return WatchSpec(NODE_KIND, "", path(NODES), field_selector=f"metadata.name={name}")


class HolderWatches:
    """Starts and stops the holder pod and node watches as the Lease stamps come and go,
    and answers what is known of a stamped pod. Lives on the controller's event loop."""

    def __init__(
        self,
        api: KubeApi,
        metrics: ControllerMetrics,
        on_change: Callable[[str], None],
        *,
        watch_timeout_seconds: int = 300,
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.on_change = on_change
        self.watch_timeout_seconds = watch_timeout_seconds
        self._wanted: dict[str, PodKey] = {}
        """Gated namespace → the pod its Lease stamp names."""
        self._pods: dict[PodKey, _Record] = {}
        self._nodes: dict[str, _Record] = {}
        self._tasks: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._closed = False

    # -- what the reconciler calls ---------------------------------------------

    def want(self, namespace: str, pod: PodKey | None) -> None:
        """The Lease of gated ``namespace`` now names ``pod`` (``None``: no live stamp).
        Starts and stops watches to match; cheap when nothing changed."""
        if self._wanted.get(namespace) == pod:
            return
        if pod is None:
            self._wanted.pop(namespace, None)
        else:
            self._wanted[namespace] = pod
        self._sync_watches()

    def seen(self, namespace: str, name: str) -> PodSeen:
        """What is known of the pod ``namespace/name`` (and of its node)."""
        record = self._pods.get((namespace, name))
        if record is None or not record.synced:
            return PodSeen("unknown", detail="holder pod not listed yet")
        pod = record.pod
        if pod is None:
            return PodSeen("absent")
        node_record = self._nodes.get(pod.node_name) if pod.node_name else None
        node = node_record.node if node_record is not None and node_record.synced else None
        return PodSeen.of(pod, node)

    def watched(self) -> tuple[list[PodKey], list[str]]:
        """The pods and nodes watched now (for tests and the log)."""
        pods = sorted(k for k in self._pods)
        return pods, sorted(self._nodes)

    async def close(self) -> None:
        """Stop every watch (shutdown)."""
        self._closed = True
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- keeping the watches in line with the stamps ---------------------------

    def _sync_watches(self) -> None:
        if self._closed:
            return
        pods = set(self._wanted.values())
        for key in [k for k in self._pods if k not in pods]:
            del self._pods[key]
            self._stop((POD_KIND, *key))
        for key in pods - set(self._pods):
            self._pods[key] = _Record()
            self._start(
                (POD_KIND, *key),
                Informer(
                    self.api,
                    _PodSink(self, key),
                    pod_watch(*key),
                    self.metrics,
                    watch_timeout_seconds=self.watch_timeout_seconds,
                ),
            )
        nodes = {r.pod.node_name for r in self._pods.values() if r.pod and r.pod.node_name}
        for name in [n for n in self._nodes if n not in nodes]:
            del self._nodes[name]
            self._stop((NODE_KIND, "", name))
        for name in nodes - set(self._nodes):
            self._nodes[name] = _Record()
            self._start(
                (NODE_KIND, "", name),
                Informer(
                    self.api,
                    _NodeSink(self, name),
                    node_watch(name),
                    self.metrics,
                    watch_timeout_seconds=self.watch_timeout_seconds,
                    backoff_max=NODE_BACKOFF_MAX_SECONDS,
                ),
            )

    def _start(self, key: tuple[str, str, str], informer: Informer) -> None:
        log(logger, logging.DEBUG, "watch started", resource=key[0], namespace=key[1], name=key[2])
        self._tasks[key] = asyncio.get_running_loop().create_task(informer.run())

    def _stop(self, key: tuple[str, str, str]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()
            log(
                logger,
                logging.DEBUG,
                "watch stopped",
                resource=key[0],
                namespace=key[1],
                name=key[2],
            )

    # -- what the informers report ---------------------------------------------

    def _namespaces_of(self, keys: Iterable[PodKey]) -> list[str]:
        wanted = set(keys)
        return sorted(ns for ns, key in self._wanted.items() if key in wanted)

    def _pod_seen(self, key: PodKey, pod: PodView | None) -> None:
        record = self._pods.get(key)
        if record is None:
            return  # a late event of a watch just stopped
        before = record.pod.node_name if record.pod else ""
        record.synced, record.pod = True, pod
        if (pod.node_name if pod else "") != before:
            self._sync_watches()
        for ns in self._namespaces_of([key]):
            self.on_change(ns)

    def _pod_unsynced(self, key: PodKey) -> None:
        record = self._pods.get(key)
        if record is not None:
            record.synced = False

    def _node_seen(self, name: str, node: NodeView | None) -> None:
        record = self._nodes.get(name)
        if record is None:
            return
        record.synced, record.node = True, node
        on_node = [k for k, r in self._pods.items() if r.pod and r.pod.node_name == name]
        for ns in self._namespaces_of(on_node):
            self.on_change(ns)

    def _node_unsynced(self, name: str) -> None:
        record = self._nodes.get(name)
        if record is not None:
            record.synced = False
