"""What the ready nodes can hold: the effective ceiling and infeasible searches. Pure.

Live measurements on AKS (10 x Standard_E16s_v5, allocatable 15740m CPU and
about 120.7Gi memory each; ElasticBLAST batch pods requesting ``num-cpus - 2``
CPU): a search whose shards land one per node is bounded by per-node packing,
floor(15740m / 6000m) = 2 concurrent searches (3 at 4 CPUs per pod), whatever
``BLAST_MAX_RUN_CONCURRENCY`` says; and a database needing more memory than any
node has (core_nt unsharded: 251.7G on 128 GB nodes) can never run at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elbgate import quantity
from elbgate.selectors import Requirement, selects


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint that keeps pods off (``NoSchedule``/``NoExecute``; ``PreferNoSchedule``
    only steers the scheduler, so it is not kept)."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    """One entry of a pod's ``tolerations``."""

    key: str
    operator: str
    """``Equal`` (the default) or ``Exists``."""
    value: str
    effect: str
    """``""`` tolerates every effect."""

    def tolerates(self, taint: Taint) -> bool:
        """The scheduler's rule (``k8s.io/api/core/v1`` ``ToleratesTaint``)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and bool(self.key) and self.value == taint.value

    @classmethod
    def all_of(cls, raw: object) -> tuple[Toleration, ...]:
        """The tolerations of a pod spec's ``tolerations`` list (malformed entries skipped)."""
        if not isinstance(raw, list):
            return ()
        return tuple(
            cls(
                str(t.get("key") or ""),
                str(t.get("operator") or "Equal"),
                str(t.get("value") or ""),
                str(t.get("effect") or ""),
            )
            for t in raw
            if isinstance(t, Mapping)
        )


@dataclass(frozen=True, slots=True)
class NodeView:
    """The few facts of a Node the capacity rules need."""

    name: str
    labels: Mapping[str, str]
    ready: bool
    """``Ready`` condition True."""
    cordoned: bool
    """``spec.unschedulable`` (``kubectl cordon``, a node being drained)."""
    cpu_milli: int
    """``status.allocatable.cpu`` in millicores (0 when unreadable)."""
    memory_bytes: int
    """``status.allocatable.memory`` in bytes (0 when unreadable)."""
    taints: tuple[Taint, ...] = ()
    """Its ``NoSchedule``/``NoExecute`` taints."""

    @classmethod
    def from_dict(cls, node: Mapping[str, Any]) -> NodeView:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        ready = any(
            isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        taints = tuple(
            Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t["effect"]))
            for t in spec.get("taints") or ()
            if isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute")
        )
        allocatable = status.get("allocatable") or {}
        return cls(
            name=str(meta.get("name") or ""),
            labels={str(k): str(v) for k, v in (labels or {}).items()},
            ready=ready,
            cordoned=bool(spec.get("unschedulable")),
            cpu_milli=_or_zero(quantity.millicores, allocatable.get("cpu")),
            memory_bytes=_or_zero(quantity.bytes_of, allocatable.get("memory")),
            taints=taints,
        )

    def usable_for(self, tolerations: tuple[Toleration, ...] = ()) -> bool:
        """Ready, not cordoned, and every taint tolerated: a pod with ``tolerations``
        could be placed here now. ElasticBLAST's pods carry no tolerations, so for
        them any ``NoSchedule``/``NoExecute`` taint takes the node away."""
        return (
            self.ready
            and not self.cordoned
            and all(any(t.tolerates(taint) for t in tolerations) for taint in self.taints)
        )

    @property
    def usable(self) -> bool:
        """Usable by a pod with no tolerations (ElasticBLAST's)."""
        return self.usable_for(())


def selected(
    nodes: tuple[NodeView, ...], requirements: tuple[Requirement, ...]
) -> tuple[NodeView, ...]:
    """The nodes whose labels satisfy ``requirements`` (a pool selector, a nodeSelector)."""
    return tuple(n for n in nodes if selects(requirements, n.labels))


def _or_zero(parse: Any, raw: object) -> int:
    try:
        return int(parse(raw))
    except quantity.QuantityError:
        return 0


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one batch pod of a search asks the scheduler for, and where that came from."""

    cpu_milli: int
    memory_bytes: int
    source: str
    """``the Job's requests`` or the settings it fell back to, for the message."""

    @property
    def text(self) -> str:
        """``6 CPU / 3.8Gi``."""
        return (
            f"{quantity.cpu_text(self.cpu_milli)} CPU / "
            f"{quantity.memory_text(self.memory_bytes, round_up=True)}"
        )


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """How many searches the pool's usable nodes hold at one search's pod shape."""

    searches: int | None
    """The node-derived ceiling; ``None`` when the pool has no usable node (an
    autoscaled pool at zero: the rule abstains rather than refuse everything)."""
    nodes: int
    """Usable (ready, schedulable) nodes in the pool."""
    explanation: str
    """The arithmetic, for the denial and ``elb-gate census``."""


def pool_capacity(
    nodes: tuple[NodeView, ...],
    pod_cpu_milli: int,
    pod_memory_bytes: int,
    nodes_per_search: int,
    tolerations: tuple[Toleration, ...] = (),
) -> PoolCapacity:
    """Searches the usable ``nodes`` hold. ``nodes_per_search == 0``: every search
    puts one pod on every node (sharded / local-SSD layout), so the tightest node's
    packing, min(floor(cpu / pod cpu), floor(memory / pod memory)), bounds it;
    ``N > 0``: a search occupies N whole nodes, floor(usable nodes / N)."""
    usable = [n for n in nodes if n.usable_for(tolerations)]
    if not usable:
        return PoolCapacity(None, 0, "no ready, schedulable node in the pool")
    if nodes_per_search > 0:
        held = len(usable) // nodes_per_search
        return PoolCapacity(
            held,
            len(usable),
            f"floor({len(usable)} ready nodes / {nodes_per_search} nodes per search) = {held}",
        )

    def per_node(node: NodeView) -> tuple[int, str]:
        by_cpu = node.cpu_milli // pod_cpu_milli if pod_cpu_milli > 0 else None
        by_mem = node.memory_bytes // pod_memory_bytes if pod_memory_bytes > 0 else None
        parts, counts = [], []
        if by_cpu is not None:
            counts.append(by_cpu)
            parts.append(
                f"floor({quantity.cpu_text(node.cpu_milli)} / {quantity.cpu_text(pod_cpu_milli)}"
                f" CPU) = {by_cpu}"
            )
        if by_mem is not None:
            counts.append(by_mem)
            parts.append(
                f"floor({quantity.memory_text(node.memory_bytes)} / "
                f"{quantity.memory_text(pod_memory_bytes, round_up=True)} memory) = {by_mem}"
            )
        return (min(counts) if counts else 1 << 30), ", ".join(parts)

    tightest = min(usable, key=lambda n: (per_node(n)[0], n.name))
    held, arithmetic = per_node(tightest)
    return PoolCapacity(
        held,
        len(usable),
        f"one pod per node on {len(usable)} ready nodes; tightest node {tightest.name}: "
        f"{arithmetic or 'no request'}",
    )


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The effective ceiling of a namespace for one search's pod shape."""

    configured: int
    """``BLAST_MAX_RUN_CONCURRENCY``."""
    pool: PoolCapacity
    shape: PodShape

    @property
    def node_derived(self) -> int | None:
        """What the nodes hold (``None``: no usable node, the rule abstains)."""
        return self.pool.searches

    @property
    def effective(self) -> int:
        """min(configured, node-derived); the configured one when the nodes abstain."""
        held = self.pool.searches
        return self.configured if held is None else min(self.configured, held)

    @property
    def binding(self) -> bool:
        """The nodes hold fewer searches than the configured ceiling allows."""
        return self.effective < self.configured

    @property
    def explanation(self) -> str:
        """``at 6 CPU / 3.8Gi per batch pod (the Job's requests): one pod per node …;
        effective ceiling min(BLAST_MAX_RUN_CONCURRENCY 3, 2) = 2``."""
        held = self.pool.searches
        ceiling = (
            f"ceiling stays BLAST_MAX_RUN_CONCURRENCY {self.configured}"
            if held is None
            else f"effective ceiling min(BLAST_MAX_RUN_CONCURRENCY {self.configured}, {held}) "
            f"= {self.effective}"
        )
        return (
            f"at {self.shape.text} per batch pod ({self.shape.source}): "
            f"{self.pool.explanation}; {ceiling}"
        )


def effective_ceiling(
    configured: int,
    nodes: tuple[NodeView, ...],
    shape: PodShape,
    nodes_per_search: int,
    tolerations: tuple[Toleration, ...] = (),
) -> Ceiling:
    """The namespace's ceiling for a search of ``shape`` on the pool ``nodes``."""
    pool = pool_capacity(nodes, shape.cpu_milli, shape.memory_bytes, nodes_per_search, tolerations)
    return Ceiling(configured, pool, shape)


@dataclass(frozen=True, slots=True)
class Infeasible:
    """A pod no usable node can ever hold."""

    need_cpu_milli: int
    need_memory_bytes: int
    largest: NodeView
    """The usable node with the most allocatable memory (then CPU)."""

    @property
    def memory_short(self) -> bool:
        """Memory is what does not fit on the largest node."""
        return self.need_memory_bytes > self.largest.memory_bytes


def infeasible(
    nodes: tuple[NodeView, ...],
    need_cpu_milli: int,
    need_memory_bytes: int,
    tolerations: tuple[Toleration, ...] = (),
) -> Infeasible | None:
    """The pod (its requests, or a database's memory need) fits no usable node in
    ``nodes`` (already narrowed to the pool and the pod's nodeSelector); ``None``
    when some node fits it, or when there is no usable node to judge by."""
    usable = [n for n in nodes if n.usable_for(tolerations)]
    if not usable:
        return None
    if any(n.cpu_milli >= need_cpu_milli and n.memory_bytes >= need_memory_bytes for n in usable):
        return None
    largest = max(usable, key=lambda n: (n.memory_bytes, n.cpu_milli, n.name))
    return Infeasible(need_cpu_milli, need_memory_bytes, largest)
