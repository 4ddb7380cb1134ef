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


@dataclass(frozen=True, slots=True)
class NodeView:
    """The few facts of a Node the capacity rules need."""

    name: str
    labels: Mapping[str, str]
    ready: bool
    """``Ready`` condition True."""
    schedulable: bool
    """Not cordoned (``spec.unschedulable``) and no NoSchedule/NoExecute taint."""
    cpu_milli: int
    """``status.allocatable.cpu`` in millicores (0 when unreadable)."""
    memory_bytes: int
    """``status.allocatable.memory`` in bytes (0 when unreadable)."""

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
        tainted = any(
            isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute")
            for t in spec.get("taints") or ()
        )
        allocatable = status.get("allocatable") or {}
        return cls(
            name=str(meta.get("name") or ""),
            labels={str(k): str(v) for k, v in (labels or {}).items()},
            ready=ready,
            schedulable=not spec.get("unschedulable") and not tainted,
            cpu_milli=_or_zero(quantity.millicores, allocatable.get("cpu")),
            memory_bytes=_or_zero(quantity.bytes_of, allocatable.get("memory")),
        )

    @property
    def usable(self) -> bool:
        """Ready and schedulable: a pod could be placed here now."""
        return self.ready and self.schedulable


def _or_zero(parse: Any, raw: object) -> int:
    try:
        return int(parse(raw))
    except quantity.QuantityError:
        return 0
