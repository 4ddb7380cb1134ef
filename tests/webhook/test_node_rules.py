"""The node rules through search admission: a ceiling the nodes hold (429 capacity) and
searches no node can run (422 db_memory_infeasible), on AKS-shaped nodes (003 §9.5, §9.6)."""

from __future__ import annotations

from typing import Any

import pytest

from elbgate.capacity import NodeView
from elbgate.settings import Settings
from testbed import elastic_blast as elb
from tests.webhook.graph import Namespace

POOL = "agentpool=blastpool"


def node(
    name: str,
    cpu: str = "15740m",
    memory: str = "126544352Ki",
    pool: str = "blastpool",
    **extra: Any,
) -> NodeView:
    """A node as the API server shows it (blast pool: Standard_E16s_v5 allocatable)."""
    labels = {"agentpool": pool, **extra.pop("labels", {})}
    ready = extra.pop("ready", True)
    return NodeView.from_dict(
        {
            "metadata": {"name": name, "labels": labels},
            "spec": extra,
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


AKS = (
    node("aks-system-0", "3860m", "12Gi", "system"),
    node("aks-system-1", "3860m", "12Gi", "system"),
    *(node(f"aks-blastpool-{i}", labels={"ordinal": str(i)}) for i in range(3)),
)


def cluster(ceiling: int = 3, **settings: Any) -> Namespace:
    values = {"capacity_pool_selector": POOL, "max_run_concurrency": ceiling, **settings}
    return Namespace(settings=Settings.of(**values), nodes=AKS)


def searches(ns: Namespace, count: int, cpus: int, first: int = 0) -> list:
    """``count`` warm searches whose first Job is a batch Job requesting ``cpus - 2`` CPU."""
    return [
        ns.judge(elb.blast_batch(elb.search_id(first + i), 0, f"db-{first + i}", num_cpus=cpus))
        for i in range(count)
    ]


# -- capacity ---------------------------------------------------------------------------------


def test_the_rule_is_off_by_default_and_only_the_configured_ceiling_counts() -> None:
    ns = Namespace(nodes=AKS)
    assert [d.reason for d in searches(ns, 4, cpus=8)] == ["ok", "ok", "ok", "ceiling"]


def test_six_cpu_pods_on_three_aks_nodes_hold_two_searches() -> None:
    ns = cluster(capacity="deny")
    admitted, third = searches(ns, 2, cpus=8), searches(ns, 1, cpus=8, first=2)[0]
    assert [d.reason for d in admitted] == ["ok", "ok"]
    assert [d.ceiling for d in admitted] == [2, 2]  # what the census metric reports
    assert admitted[1].details["effective_ceiling"] == 2  # and the log line
    assert (third.allowed, third.code, third.reason) == (False, 429, "capacity")
    assert third.message == (
        "Capacity: the ready nodes of the pool agentpool=blastpool hold 2 searches at 6 CPU / "
        "3.8Gi per batch pod (the Job's requests): one pod per node on 3 ready nodes; tightest "
        "node aks-blastpool-0: floor(15740m / 6 CPU) = 2, floor(120.6Gi / 3.8Gi memory) = 32; "
        "effective ceiling min(BLAST_MAX_RUN_CONCURRENCY 3, 2) = 2. 2/2 searches are active in "
        f"namespace default ({elb.search_id(0)}, {elb.search_id(1)}), so Job "
        f"default/blastn-batch-db-2-job-0-{elb.search_id(2)[-8:]} (app=blast, "
        f"elb-job-id={elb.search_id(2)}) cannot open another: its pods would wait Pending. "
        f"Retry when one of {elb.search_id(0)}, {elb.search_id(1)} completes."
    )


def test_four_cpu_pods_hold_three() -> None:
    ns = cluster(ceiling=5, capacity="deny")
    decisions = searches(ns, 4, cpus=6)
    assert [d.reason for d in decisions] == ["ok", "ok", "ok", "capacity"]
    assert "floor(15740m / 4 CPU) = 3" in decisions[3].message
    assert "min(BLAST_MAX_RUN_CONCURRENCY 5, 3) = 3" in decisions[3].message


def test_the_configured_ceiling_still_wins_when_it_is_lower() -> None:
    ns = cluster(ceiling=1, capacity="deny")
    assert [d.reason for d in searches(ns, 2, cpus=6)] == ["ok", "ceiling"]


@pytest.mark.parametrize(
    "kind",
    ["cold-local-ssd", "cold-pv", "partitioned", "sharded", "cloud-job-submission", "prepare-only"],
)
def test_a_search_opened_by_a_setup_or_submit_job_is_sized_by_the_settings(kind: str) -> None:
    ns = cluster(capacity="deny", capacity_pod_cpu="6")
    searches(ns, 2, cpus=8, first=10)
    before = ns.names()
    first, *rest = ns.apply(elb.flow(kind, elb.search_id(1)))
    assert (first.code, first.reason) == (429, "capacity")
    assert "6 CPU / 3.8Gi per batch pod (ELB_GATE_CAPACITY_POD_CPU/_MEMORY)" in first.message
    assert not any(d.allowed for d in rest) and ns.names() == before


def test_warm_reuse_passes_import_queries_and_is_refused_at_its_first_batch_job() -> None:
    ns = cluster(capacity="deny")
    searches(ns, 2, cpus=8, first=10)
    first, second, *_ = ns.apply(elb.flow("warm-reuse", elb.search_id(1)))
    assert first.reason == "holder_setup" and second.reason == "capacity"


def test_jobs_of_an_active_search_join_without_the_capacity_rule() -> None:
    ns = cluster(capacity="deny")
    searches(ns, 2, cpus=8)
    assert ns.judge(elb.blast_batch(elb.search_id(0), 1, "db-0")).reason == "joins_active"


def test_warn_admits_with_the_refusal_as_a_warning() -> None:
    ns = cluster(capacity="warn")
    decision = searches(ns, 3, cpus=8)[2]
    assert decision.allowed and [w.reason for w in decision.warned] == ["capacity"]
    assert (
        decision.response()
        .warnings[0]
        .startswith("search-admission.elb-gate.io would deny: Capacity: the ready nodes")
    )


def test_nodes_not_yet_synced_refuse_fail_closed_and_warn_admits() -> None:
    ns = cluster(capacity="deny")
    ns.nodes = None
    decision = searches(ns, 1, cpus=8)[0]
    assert (decision.code, decision.reason) == (503, "unverified")
    assert "the Node watch has not synced yet" in decision.message
    ns.settings = Settings.of(capacity="warn", capacity_pool_selector=POOL)
    assert searches(ns, 1, cpus=8, first=1)[0].allowed


def test_a_pool_with_no_usable_node_abstains() -> None:
    ns = cluster(capacity="deny")
    ns.nodes = (node("aks-blastpool-0", ready=False), node("aks-blastpool-1", unschedulable=True))
    assert [d.reason for d in searches(ns, 4, cpus=8)] == ["ok", "ok", "ok", "ceiling"]


def test_only_the_pools_ready_untainted_nodes_count_whole_nodes_per_search() -> None:
    ns = cluster(capacity="deny", capacity_nodes_per_search=2)
    ns.nodes = (
        *AKS,
        node("aks-blastpool-3"),
        node("aks-blastpool-4", ready=False),
        node("aks-blastpool-5", taints=[{"key": "spot", "value": "true", "effect": "NoSchedule"}]),
    )
    decisions = searches(ns, 3, cpus=8)
    assert [d.reason for d in decisions] == ["ok", "ok", "capacity"]
    assert "floor(4 ready nodes / 2 nodes per search) = 2" in decisions[2].message


def test_a_taint_the_batch_pods_tolerate_leaves_the_node_in_the_pool() -> None:
    ns = cluster(capacity="deny", capacity_nodes_per_search=2)
    taint = {"key": "workload", "value": "blast", "effect": "NoSchedule"}
    ns.nodes = tuple(node(f"aks-blastpool-{i}", taints=[taint]) for i in range(4))
    assert ns.judge(elb.blast_batch(elb.search_id(1), 0, "db-1")).reason == "ok"  # abstains
    tolerant = [elb.blast_batch(elb.search_id(n), 0, f"db-{n}") for n in (2, 3)]
    for body in tolerant:
        body["spec"]["template"]["spec"]["tolerations"] = [
            {"key": "workload", "operator": "Equal", "value": "blast", "effect": "NoSchedule"}
        ]
    # 4 nodes / 2 per search = 2: the second tolerant search finds 2 active.
    assert [d.reason for d in ns.apply(tolerant)] == ["ok", "capacity"]


def submit(ns: Namespace, bodies: list) -> Any:
    """``elastic-blast submit``: applies the Jobs in order and stops at the first refusal
    (its ``kubectl apply`` fails); the refusal, or the last admission."""
    for body in bodies:
        decision = ns.judge(body)
        if not decision.allowed:
            return decision
    return decision


# -- feasibility ------------------------------------------------------------------------------

CORE_NT = {"core_nt": "251.7G"}


def feasible(**settings: Any) -> Namespace:
    ns = cluster(**{"feasibility": "deny", **settings})
    ns.db_memory = dict(CORE_NT)
    return ns


@pytest.mark.parametrize("kind", ["cold-local-ssd", "cold-pv", "prepare-only"])
def test_a_core_nt_search_is_refused_at_its_first_job_from_its_database_alone(kind: str) -> None:
    ns = feasible()
    before = ns.names()
    first = submit(ns, elb.flow(kind, elb.search_id(1), "core_nt"))
    assert (first.allowed, first.code, first.reason) == (False, 422, "db_memory_infeasible")
    assert (
        "database core_nt needs 251.7G (234.5Gi) of memory on one node (ConfigMap elb-system/elb-gate-db-memory)"
        in first.message
    )
    assert "the largest ready node of the pool agentpool=blastpool" in first.message
    assert "has 15740m CPU / 120.6Gi memory allocatable: no node can ever run it" in first.message
    assert "split it so each part fits in 120.6Gi: at least 2 partitions or shards" in first.message
    assert ns.names() == before


def test_the_first_cold_local_ssd_job_names_its_node_and_the_size_that_would_fit() -> None:
    ns = feasible()
    decision = ns.judge(elb.init_ssd(elb.search_id(1), 0, "core_nt"))
    assert decision.message == (
        f"Feasibility: Job default/init-ssd-{elb.search_id(1)[-8:]}-0 (app=setup, "
        f"elb-job-id={elb.search_id(1)}) requests nothing per pod, and database core_nt needs "
        "251.7G (234.5Gi) of memory on one node (ConfigMap elb-system/elb-gate-db-memory), but "
        "the largest ready node of the pool agentpool=blastpool matching its nodeSelector "
        "ordinal=0, aks-blastpool-0, has 15740m CPU / 120.6Gi memory allocatable: no node can "
        "ever run it, so it is refused before anything of its search starts (waiting would "
        "not help). Fix: search core_nt on nodes with at least 234.5Gi allocatable memory (a "
        "larger VM size), or split it so each part fits in 120.6Gi: at least 2 partitions or "
        "shards."
    )


@pytest.mark.parametrize("kind", ["partitioned", "sharded"])
def test_a_partitioned_or_sharded_core_nt_fits_one_part_per_node(kind: str) -> None:
    ns = feasible()
    decisions = ns.apply(elb.flow(kind, elb.search_id(1), "core_nt"))
    assert all(d.allowed for d in decisions), [(n, d.message) for n, d in ns.decisions]


def test_warm_reuse_of_core_nt_is_refused_at_its_first_batch_job() -> None:
    ns = feasible()
    first, second, *_ = ns.apply(elb.flow("warm-reuse", elb.search_id(1), "core_nt"))
    assert first.reason == "holder_setup" and second.reason == "db_memory_infeasible"


def test_a_pod_request_larger_than_every_node_is_refused_without_the_table() -> None:
    ns = cluster(feasibility="deny")
    decision = ns.judge(elb.blast_batch(elb.search_id(1), 0, num_cpus=20, mem_request="200Gi"))
    assert (decision.code, decision.reason) == (422, "db_memory_infeasible")
    assert "requests 18 CPU / 200Gi memory per pod, but the largest ready node" in decision.message
    assert "Fix: request at most 15740m CPU / 120.6Gi memory per pod" in decision.message


def test_it_is_judged_before_the_ceiling_waiting_would_not_help() -> None:
    ns = feasible()
    searches(ns, 3, cpus=8, first=10)
    assert ns.judge(elb.init_ssd(elb.search_id(1), 0, "core_nt")).reason == "db_memory_infeasible"


def test_a_batch_job_of_an_active_search_is_judged_too() -> None:
    ns = feasible()
    job_id = elb.search_id(1)
    assert ns.judge(elb.init_ssd(job_id, 0, "16S_ribosomal_RNA")).allowed
    decision = ns.judge(elb.blast_batch(job_id, 0, num_cpus=8, mem_request="130Gi"))
    assert decision.reason == "db_memory_infeasible" and "before anything" not in decision.message


def test_an_unlisted_database_and_a_missing_table_need_nothing() -> None:
    ns = feasible()
    assert all(
        d.allowed
        for d in ns.apply(elb.flow("cold-local-ssd", elb.search_id(1), "16S_ribosomal_RNA"))
    )
    ns = cluster(feasibility="deny")
    assert ns.judge(elb.init_ssd(elb.search_id(2), 0, "core_nt")).allowed


def test_feasibility_warn_and_off() -> None:
    ns = feasible(feasibility="warn")
    decision = ns.judge(elb.init_ssd(elb.search_id(1), 0, "core_nt"))
    assert decision.allowed and [w.reason for w in decision.warned] == ["db_memory_infeasible"]
    ns = feasible(feasibility="off")
    assert ns.judge(elb.init_ssd(elb.search_id(2), 0, "core_nt")).reason == "ok"
