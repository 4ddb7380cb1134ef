"""The two rules that read the nodes: a ceiling the nodes can hold, and searches no
node can ever run. Pure; the nodes come from the webhook's Node watch cache.

* ``capacity`` (429, ``ELB_GATE_CAPACITY``): at a search's first Job, the
  effective ceiling is min(``BLAST_MAX_RUN_CONCURRENCY``, what the usable nodes
  of the pool hold at the search's per-pod requests) — :mod:`elbgate.capacity`.
  Retryable: a slot frees when a search completes.
* ``db_memory_infeasible`` (422, ``ELB_GATE_FEASIBILITY``): a search Job whose
  pod — its requests, or the memory its database needs on one node (the
  operator's table, :mod:`elbgate.db_memory`) — fits no usable node of the pool
  that matches its nodeSelector. Not retryable: waiting changes nothing, the
  search (or the pool) must change. 422 ``Invalid`` is what both submit paths
  already treat as "fix the object" (they retry 409, 429 and 503 only), so an
  impossible search costs one refused Job instead of a dispatch cycle.

Both abstain when the pool has no usable node (an autoscaled pool at zero), and
both fail closed (503) while the Node watch cache is not synced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elbgate import quantity
from elbgate.capacity import (
    Ceiling,
    Infeasible,
    NodeView,
    PodShape,
    Toleration,
    effective_ceiling,
    infeasible,
    selected,
)
from elbgate.db_memory import DbMemoryTable, MemoryNeed, memory_need
from elbgate.names import BLAST_APP
from elbgate.pod_template import node_selector, pod_requests, pod_spec
from elbgate.selectors import Requirement, parse_selector
from elbgate.settings import GateSettings, RuleSettings
from webhook.decision import Decision, refuse, unverified


@dataclass(frozen=True, slots=True)
class NodesSeen:
    """What the Node watch cache (and the database memory table) held at decision time."""

    nodes: tuple[NodeView, ...] | None
    """The pool's nodes; ``None`` when the cache is not synced (see ``failure``)."""
    failure: str = ""
    table: DbMemoryTable | None = DbMemoryTable({})
    """The operator's database memory table; ``None`` when its watch is not synced."""
    table_failure: str = ""
    table_source: str = ""
    """Where the table came from, for the message (``ConfigMap elb-system/elb-gate-db-memory``)."""


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What a search Job's pod template says about placement and size."""

    cpu_milli: int | None
    memory_bytes: int | None
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]

    @classmethod
    def of(cls, job: Mapping[str, Any]) -> PodFacts:
        requests = pod_requests(job)
        return cls(
            requests.cpu_milli,
            requests.memory_bytes,
            node_selector(job),
            Toleration.all_of(pod_spec(job).get("tolerations")),
        )

    @property
    def selector_requirements(self) -> tuple[Requirement, ...]:
        return tuple(Requirement(k, "in", frozenset({v})) for k, v in self.node_selector.items())

    @property
    def selector_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))


def pool(rules: RuleSettings, nodes: tuple[NodeView, ...]) -> tuple[NodeView, ...]:
    """The nodes searches run on (``ELB_GATE_CAPACITY_POOL_SELECTOR``)."""
    return selected(nodes, parse_selector(rules.capacity_pool_selector))


def pool_text(rules: RuleSettings) -> str:
    selector = rules.capacity_pool_selector.strip()
    return f"pool {selector}" if selector else "cluster (every node)"


def pod_shape(app: str, pod: PodFacts, rules: RuleSettings) -> PodShape:
    """One batch pod's requests: the Job's own when it is a batch Job that carries
    them, else the settings (a setup or submit Job does not show the batch pods)."""
    if app == BLAST_APP and pod.cpu_milli:
        memory = pod.memory_bytes or quantity.bytes_of(rules.capacity_pod_memory)
        return PodShape(pod.cpu_milli, memory, "the Job's requests")
    return PodShape(
        quantity.millicores(rules.capacity_pod_cpu),
        quantity.bytes_of(rules.capacity_pod_memory),
        "ELB_GATE_CAPACITY_POD_CPU/_MEMORY",
    )


def ceiling_of(
    app: str, pod: PodFacts, nodes: tuple[NodeView, ...], gate: GateSettings, rules: RuleSettings
) -> Ceiling:
    """The effective ceiling a new search of this Job's shape meets."""
    return effective_ceiling(
        gate.max_run_concurrency,
        pool(rules, nodes),
        pod_shape(app, pod, rules),
        rules.capacity_nodes_per_search,
        pod.tolerations,
    )


def capacity(
    ref: str,
    namespace: str,
    active_ids: tuple[str, ...],
    app: str,
    pod: PodFacts,
    seen: NodesSeen,
    gate: GateSettings,
    rules: RuleSettings,
) -> tuple[Decision | None, Ceiling | None]:
    """429 ``capacity`` when the namespace already runs as many searches as the
    nodes hold at this search's shape (503 when the nodes are unknown); with the
    ceiling it computed, for the admit's facts and the census metric."""
    if seen.nodes is None:
        return unverified(f"the nodes' capacity for {ref}", seen.failure), None
    ceiling = ceiling_of(app, pod, seen.nodes, gate, rules)
    active = len(active_ids)
    if ceiling.node_derived is None or active < ceiling.effective:
        return None, ceiling
    ids = ", ".join(active_ids)
    return (
        refuse(
            429,
            "capacity",
            f"Capacity: the ready nodes of the {pool_text(rules)} hold "
            f"{ceiling.node_derived} searches {ceiling.explanation}. {active}/"
            f"{ceiling.effective} searches are active in namespace {namespace} ({ids}), so "
            f"{ref} cannot open another: its pods would wait Pending. Retry when one of "
            f"{ids} completes.",
            active=list(active_ids),
            ceiling=gate.max_run_concurrency,
            effective_ceiling=ceiling.effective,
            node_derived=ceiling.node_derived,
        ),
        ceiling,
    )


def _fits(largest: NodeView) -> str:
    return (
        f"{quantity.cpu_text(largest.cpu_milli)} CPU / "
        f"{quantity.memory_text(largest.memory_bytes)} memory"
    )


def feasibility(
    ref: str,
    job: Mapping[str, Any],
    pod: PodFacts,
    seen: NodesSeen,
    rules: RuleSettings,
    *,
    opens: bool,
) -> Decision | None:
    """422 ``db_memory_infeasible`` when this Job's pod fits no usable node of the pool
    matching its nodeSelector (503 when the nodes or the table are unknown)."""
    if seen.nodes is None:
        return unverified(f"whether any node can run {ref}", seen.failure)
    if seen.table is None:
        return unverified(f"the database memory needs for {ref}", seen.table_failure)
    in_pool = pool(rules, seen.nodes)
    usable = sum(1 for n in in_pool if n.usable_for(pod.tolerations))
    need = memory_need(job, seen.table, usable)
    need_memory = max(pod.memory_bytes or 0, need.per_node if need else 0)
    need_cpu = pod.cpu_milli or 0
    if need_memory == 0 and need_cpu == 0:
        return None
    candidates = selected(in_pool, pod.selector_requirements)
    found = infeasible(candidates, need_cpu, need_memory, pod.tolerations)
    if found is None:
        return None
    return _infeasible_refusal(ref, pod, need, found, seen, rules, opens=opens)


def _infeasible_refusal(
    ref: str,
    pod: PodFacts,
    need: MemoryNeed | None,
    found: Infeasible,
    seen: NodesSeen,
    rules: RuleSettings,
    *,
    opens: bool,
) -> Decision:
    largest = found.largest
    where = pool_text(rules)
    if pod.node_selector:
        where += f" matching its nodeSelector {pod.selector_text}"
    asked = []
    if pod.cpu_milli:
        asked.append(f"{quantity.cpu_text(pod.cpu_milli)} CPU")
    if pod.memory_bytes:
        asked.append(f"{quantity.memory_text(pod.memory_bytes, round_up=True)} memory")
    request = f"requests {' / '.join(asked)} per pod" if asked else "requests nothing per pod"
    by_db = need is not None and found.memory_short and need.per_node >= (pod.memory_bytes or 0)
    if by_db and need is not None:
        source = f" ({seen.table_source})" if seen.table_source else ""
        what = f"{request}, and {need.text}{source}"
        parts = -(-need.whole // max(largest.memory_bytes, 1))
        fix = (
            f"search {need.db} on nodes with at least "
            f"{quantity.memory_text(need.per_node, round_up=True)} allocatable memory "
            f"(a larger VM size), or split it so each part fits in "
            f"{quantity.memory_text(largest.memory_bytes)}: at least {parts} "
            "partitions or shards"
        )
    else:
        what = request
        fix = (
            f"request at most {_fits(largest)} per pod (ElasticBLAST: num-cpus - 2 CPU, "
            "mem-request), or add nodes that large"
        )
    after = " before anything of its search starts" if opens else ""
    return refuse(
        422,
        "db_memory_infeasible",
        f"Feasibility: {ref} {what}, but the largest ready node of the {where}, "
        f"{largest.name}, has {_fits(largest)} allocatable: no node can ever run it, so it "
        f"is refused{after} (waiting would not help). Fix: {fix}.",
        need_cpu_milli=found.need_cpu_milli,
        need_memory_bytes=found.need_memory_bytes,
        largest_node=largest.name,
        db=need.db if need else None,
    )
