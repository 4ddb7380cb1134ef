"""What the ready nodes hold: the node-derived ceiling and infeasible pods (003 §9 numbers)."""

from __future__ import annotations

from typing import Any

from elbgate.capacity import NodeView, infeasible, pool_capacity

GI = 2**30


def node(
    name: str, cpu: str = "15740m", memory: str = "123596Mi", ready: bool = True, **spec: Any
) -> NodeView:
    """An AKS Standard_E16s_v5 node as the API server shows it."""
    return NodeView.from_dict(
        {
            "metadata": {"name": name, "labels": {"agentpool": "blastpool"}},
            "spec": spec,
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


POOL = tuple(node(f"aks-blastpool-{i}") for i in range(10))


def test_core_nt_one_shard_per_node_at_6_cpus_holds_two_searches() -> None:
    held = pool_capacity(POOL, 6000, 4 * 10**9, nodes_per_search=0)
    assert (held.searches, held.nodes) == (2, 10)
    assert "floor(15740m / 6 CPU) = 2" in held.explanation


def test_at_4_cpus_per_pod_the_same_pool_holds_three() -> None:
    assert pool_capacity(POOL, 4000, 4 * 10**9, nodes_per_search=0).searches == 3


def test_searches_occupying_whole_nodes_divide_the_ready_nodes() -> None:
    held = pool_capacity(POOL, 6000, 4 * 10**9, nodes_per_search=4)
    assert (
        held.searches == 2 and "floor(10 ready nodes / 4 nodes per search) = 2" in held.explanation
    )


def test_not_ready_cordoned_and_tainted_nodes_do_not_count() -> None:
    nodes = (
        *POOL[:3],
        node("down", ready=False),
        node("cordoned", unschedulable=True),
        node("tainted", taints=[{"key": "k", "effect": "NoSchedule"}]),
    )
    assert pool_capacity(nodes, 6000, 0, nodes_per_search=1).nodes == 3


def test_an_empty_pool_abstains_instead_of_refusing_everything() -> None:
    assert pool_capacity((node("down", ready=False),), 6000, 0, 0).searches is None


def test_the_tightest_node_bounds_a_one_pod_per_node_search() -> None:
    small = node("aks-small", cpu="7900m")
    assert pool_capacity((*POOL, small), 6000, 0, 0).searches == 1


def test_a_core_nt_sized_memory_need_fits_no_128_gb_node() -> None:
    found = infeasible(POOL, 6000, 251_700_000_000)
    assert found is not None and found.largest.memory_bytes == 123596 * 2**20


def test_a_pod_that_fits_one_node_is_feasible() -> None:
    assert infeasible(POOL, 6000, 100 * GI) is None
    assert infeasible((), 6000, 10**15) is None  # no node to judge by: abstain
