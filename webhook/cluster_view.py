"""The webhook's watch caches of what the node rules read: the pool's Nodes and the
operator's database memory ConfigMap.

Admission must not LIST every Node per request (a cluster-scoped read on the hot
path), so the webhook keeps them current with one LIST + WATCH each
(:class:`elbgate.kube.informer.Informer`), only while a node rule is on
(``ELB_GATE_CAPACITY`` / ``ELB_GATE_FEASIBILITY`` not ``off``):

* Nodes, cluster-wide, narrowed server-side by ``ELB_GATE_CAPACITY_POOL_SELECTOR``
  (read-only; docs/capacity.md says why the webhook needs it);
* the ConfigMap ``ELB_GATE_DB_MEMORY_CONFIGMAP`` in elb-gate's own namespace, by
  name (``fieldSelector=metadata.name=…``), when the feasibility rule is on. It is
  optional: absent means an empty table.

Until a cache has synced, and whenever its watch is broken, the rules that need it
refuse with 503 (fail-closed): a stale or empty view would admit what the nodes
cannot hold. Readiness waits for the first sync (only the first), so a new
replica takes no traffic before it can judge.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from elbgate.capacity import NodeView
from elbgate.db_memory import DbMemoryTable
from elbgate.kube.api import CONFIGMAPS, NODES, KubeApi, path
from elbgate.kube.informer import Informer, WatchMetrics, WatchSpec
from elbgate.logs import log
from elbgate.settings import RuleSettings
from webhook.node_rules import NodesSeen
from webhook.search_admission import node_rules_on

_log = logging.getLogger("webhook.cluster_view")

NODE_KIND = "nodes"
CONFIGMAP_KIND = "configmaps"


class _Nodes:
    """The pool's Nodes by name (an informer :class:`~elbgate.kube.informer.Sink`)."""

    def __init__(self) -> None:
        self.by_name: dict[str, NodeView] = {}
        self.synced = False

    def replace(self, kind: str, namespace: str, items: Iterable[Mapping[str, Any]]) -> None:
        views = (NodeView.from_dict(o) for o in items)
        self.by_name = {v.name: v for v in views}
        self.synced = True

    def apply(self, kind: str, namespace: str, event_type: str, obj: Mapping[str, Any]) -> None:
        view = NodeView.from_dict(obj)
        if event_type == "DELETED":
            self.by_name.pop(view.name, None)
        else:
            self.by_name[view.name] = view

    def mark_unsynced(self, kind: str, namespace: str) -> None:
        self.synced = False


class _DbMemory:
    """The database memory table from the operator's ConfigMap (empty when absent)."""

    def __init__(self, source: str) -> None:
        self.table = DbMemoryTable({})
        self.synced = False
        self.source = source

    def _set(self, data: Mapping[str, Any] | None) -> None:
        self.table = DbMemoryTable.from_data(data)
        for problem in self.table.problems:
            log(
                _log,
                logging.WARNING,
                "database memory entry ignored",
                source=self.source,
                problem=problem,
            )

    def replace(self, kind: str, namespace: str, items: Iterable[Mapping[str, Any]]) -> None:
        found = list(items)
        self._set(found[0].get("data") if found else None)
        self.synced = True

    def apply(self, kind: str, namespace: str, event_type: str, obj: Mapping[str, Any]) -> None:
        self._set(None if event_type == "DELETED" else obj.get("data"))

    def mark_unsynced(self, kind: str, namespace: str) -> None:
        self.synced = False


class ClusterView:
    """The Node and database-memory watch caches; :meth:`seen` is what admission reads.
    ``namespace`` is elb-gate's own (``ELB_GATE_POD_NAMESPACE``), where the database
    memory ConfigMap lives."""

    def __init__(
        self,
        api: KubeApi,
        rules: RuleSettings,
        namespace: str,
        metrics: WatchMetrics,
        *,
        watch_timeout_seconds: int = 300,
    ) -> None:
        self.enabled = node_rules_on(rules)
        self._nodes = _Nodes()
        name = rules.db_memory_configmap.strip()
        self._table = _DbMemory(f"ConfigMap {namespace}/{name}" if name else "")
        self._informers: dict[str, Informer] = {}
        self._started = False
        if not self.enabled:
            return
        self._informers[NODE_KIND] = Informer(
            api,
            self._nodes,
            WatchSpec(
                NODE_KIND,
                "",
                path(NODES),
                label_selector=rules.capacity_pool_selector.strip() or None,
            ),
            metrics,
            watch_timeout_seconds=watch_timeout_seconds,
        )
        if rules.feasibility != "off" and name:
            self._informers[CONFIGMAP_KIND] = Informer(
                api,
                self._table,
                WatchSpec(
                    CONFIGMAP_KIND,
                    namespace,
                    path(CONFIGMAPS, namespace),
                    field_selector=f"metadata.name={name}",
                ),
                metrics,
                watch_timeout_seconds=watch_timeout_seconds,
            )
        else:
            self._table.synced = True  # no table to read: every database is unknown

    async def run(self) -> None:
        """List and watch until cancelled (nothing to do when no node rule is on)."""
        if not self._informers:
            return
        async with asyncio.TaskGroup() as group:
            for informer in self._informers.values():
                group.create_task(informer.run())

    def _failure(self, kind: str, what: str) -> str:
        informer = self._informers.get(kind)
        error = informer.last_error if informer is not None else ""
        if error:
            return f"the {what} watch is broken: {error}"
        return f"the {what} watch has not synced yet"

    @property
    def synced(self) -> bool:
        """Every cache holds a complete, current view."""
        return self._nodes.synced and self._table.synced

    def startup_problems(self) -> list[str]:
        """What readiness reports until every cache has synced once. Only the first
        sync: a watch that breaks later makes the node rules refuse (503), but must
        not take the replica out of service, which would refuse every Lease write too."""
        if not self.enabled or self._started:
            return []
        out = []
        if not self._nodes.synced:
            out.append(self._failure(NODE_KIND, "Node"))
        if not self._table.synced:
            out.append(self._failure(CONFIGMAP_KIND, self._table.source))
        self._started = not out
        return out

    def seen(self) -> NodesSeen:
        """The caches as they are now (``None`` parts while not synced)."""
        nodes = tuple(self._nodes.by_name.values()) if self._nodes.synced else None
        table = self._table.table if self._table.synced else None
        return NodesSeen(
            nodes,
            "" if nodes is not None else self._failure(NODE_KIND, "Node"),
            table,
            "" if table is not None else self._failure(CONFIGMAP_KIND, self._table.source),
            self._table.source,
        )
