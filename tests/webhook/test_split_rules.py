"""What a split shard gets from every rule, with ElasticBLAST's own Job bodies.

A shard (its first Job admitted under a Lease held by ``dashboard-split-<uuid>`` and
stamped with the dashboard's user) skips Gate B and the capacity rule, and only
those: Gate A, one staging per database, feasibility and the label rules judge it as
any search (docs/design.md "Split searches"). The dashboard never retries a shard,
so each refusal it can still meet is one a retry would not cure.
"""

from __future__ import annotations

from typing import Any

from elbgate.identities import SubmitterIdentities
from elbgate.settings import Settings
from testbed import elastic_blast as elb
from tests.builders import lease, user
from tests.webhook.graph import Namespace
from tests.webhook.test_node_rules import AKS, POOL

DASHBOARD = user("dashboard-lease")
IDENTITIES = SubmitterIdentities.parse(
    {"splitHolders": [{"holderPrefix": "dashboard-split-", "users": ["dashboard-lease"]}]}
)
SPLIT_HOLDER = "dashboard-split-5d41402abc4b2a76b9719d911017c592"
SPLIT_LEASE = lease(SPLIT_HOLDER, holder_user="dashboard-lease")


def busy(active: int = 3, **settings: Any) -> Namespace:
    """A namespace at ``active`` warm searches, the Lease held by a split shard."""
    values = {"capacity_pool_selector": POOL, **settings}
    ns = Namespace(
        lease=SPLIT_LEASE, settings=Settings.of(**values), nodes=AKS, identities=IDENTITIES
    )
    held, ns.lease = ns.lease, lease("dashboard-1", holder_user="dashboard-lease")
    for i in range(active):
        assert ns.judge(elb.blast_batch(elb.search_id(100 + i), 0, f"db-{i}"), DASHBOARD).allowed
    ns.lease = held
    return ns


def test_at_the_ceiling_every_kind_of_shard_opens_as_a_split() -> None:
    for kind in ("cloud-job-submission", "warm-reuse", "cold-pv", "cold-local-ssd"):
        ns = busy(3)
        decisions = ns.apply(elb.flow(kind, elb.search_id(1)), DASHBOARD)
        assert all(d.allowed for d in decisions), (kind, [d.message for d in decisions])
        opened = [d for d in decisions if d.reason == "split_shard"]
        assert len(opened) == 1 and opened[0].details["split"] == "dashboard-split-", kind
        assert opened[0].details["active"] == [elb.search_id(100 + i) for i in range(3)]


def test_the_capacity_rule_does_not_refuse_a_shard_but_does_refuse_a_regular_search() -> None:
    ns = busy(2, capacity="deny")  # 6-CPU pods on 3 blast nodes: the nodes hold 2
    shard = ns.judge(elb.submit_jobs(elb.search_id(1)), DASHBOARD)
    assert (shard.allowed, shard.reason) == (True, "split_shard")
    ns.lease = lease("dashboard-2", holder_user="dashboard-lease")
    regular = ns.judge(elb.submit_jobs(elb.search_id(2)), DASHBOARD)
    assert (regular.allowed, regular.code) == (False, 429)


def test_gate_a_still_needs_the_shards_own_lease() -> None:
    ns = busy(0)
    other = ns.judge(elb.submit_jobs(elb.search_id(1)), user("mallory"))
    assert (other.allowed, other.code, other.reason) == (False, 403, "not_holder")
    ns.lease = lease(SPLIT_HOLDER, holder_user="dashboard-lease", renewed_ago=3600)
    late = ns.judge(elb.submit_jobs(elb.search_id(2)), DASHBOARD)
    assert (late.allowed, late.code, late.reason) == (False, 403, "lease_expired")


def test_an_unstamped_or_foreign_stamped_split_holder_is_a_regular_search() -> None:
    ns = busy(3)
    ns.lease = lease(SPLIT_HOLDER)  # no stamp: Gate A refuses before any exemption
    assert ns.judge(elb.submit_jobs(elb.search_id(1)), DASHBOARD).code == 403
    ns.lease = lease(SPLIT_HOLDER, holder_user="mallory")
    refused = ns.judge(elb.submit_jobs(elb.search_id(2)), user("mallory"))
    assert (refused.allowed, refused.code, refused.reason) == (False, 429, "ceiling")
    assert "carries split prefix dashboard-split-, but its stamped user mallory" in (
        refused.message
    )


def test_a_shard_never_stages_a_database_a_sibling_is_staging() -> None:
    ns = busy(0)
    first = ns.apply(elb.flow("cold-local-ssd", elb.search_id(1), "core_nt"), DASHBOARD)
    assert all(d.allowed for d in first)  # its init-ssd Jobs are still running
    second = ns.judge(elb.init_ssd(elb.search_id(2), 0, "core_nt"), DASHBOARD)
    assert (second.allowed, second.code, second.reason) == (False, 429, "db_staging")
    reads = ns.judge(elb.blast_batch(elb.search_id(3), 0, "core_nt"), DASHBOARD)
    assert (reads.allowed, reads.reason) == (False, "db_staging")
    # A cloud-job-submission shard names no database: it cannot be told apart from one
    # that reads the half-copied one, so it waits for the staging like any search.
    blind = ns.judge(elb.submit_jobs(elb.search_id(4)), DASHBOARD)
    assert (blind.allowed, blind.reason) == (False, "db_staging")
    ns.finish_setup(elb.search_id(1))
    assert ns.judge(elb.blast_batch(elb.search_id(3), 0, "core_nt"), DASHBOARD).allowed
    assert ns.judge(elb.submit_jobs(elb.search_id(4)), DASHBOARD).reason == "split_shard"


def test_a_shard_no_node_can_run_is_refused_at_once() -> None:
    ns = busy(3, feasibility="deny")
    huge = elb.blast_batch(elb.search_id(1), 0, num_cpus=20, mem_request="200Gi")
    decision = ns.judge(huge, DASHBOARD)
    assert (decision.allowed, decision.code, decision.reason) == (
        False,
        422,
        "db_memory_infeasible",
    )


def test_a_shard_with_a_look_alike_label_is_refused() -> None:
    ns = busy(3)
    body = elb.submit_jobs(elb.search_id(1))
    body["metadata"]["labels"]["app"] = "Submit"
    decision = ns.judge(body, DASHBOARD)
    assert (decision.allowed, decision.code, decision.reason) == (False, 422, "near_miss_label")
