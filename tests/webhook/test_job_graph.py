"""The real ElasticBLAST job graph through search admission, flow by flow.

Every flow (cold local SSD, cold persistent volume, partitioned, sharded, warm
reuse, cloud job submission, prepare only) is played Job by Job with the
templates' shapes: admitted under the ceiling, refused at its first Job at the
ceiling with nothing of it left behind.
"""

from __future__ import annotations

import pytest

from tests.protocol import elastic_blast as elb
from tests.webhook.builders import user
from tests.webhook.graph import ALICE, Namespace

BOB = user("bob")
IN_CLUSTER = user(elb.SUBMITTER_SA)


def busy(n: int) -> Namespace:
    """A namespace with ``n`` searches running (batch work on a database of their own)."""
    ns = Namespace()
    for i in range(n):
        ns.jobs.append(elb.blast_batch(elb.search_id(100 + i), 0, f"other-db-{i}"))
    return ns


@pytest.mark.parametrize("kind", elb.FLOWS)
def test_each_flow_is_admitted_whole_below_the_ceiling(kind: str) -> None:
    ns = busy(2)
    decisions = ns.apply(elb.flow(kind, elb.search_id(1)))
    assert all(d.allowed for d in decisions), [(n, d.message) for n, d in ns.decisions]


@pytest.mark.parametrize("kind", [k for k in elb.FLOWS if k != "warm-reuse"])
def test_each_flow_is_refused_at_its_first_job_at_the_ceiling_leaving_nothing(kind: str) -> None:
    ns = busy(3)
    before = ns.names()
    decisions = ns.apply(elb.flow(kind, elb.search_id(1)))
    assert not any(d.allowed for d in decisions)
    assert decisions[0].code == 429 and decisions[0].reason == "ceiling"
    assert ns.names() == before  # nothing of the refused search was created


def test_warm_reuse_at_the_ceiling_passes_import_queries_but_refuses_the_search_itself() -> None:
    ns = busy(3)
    first, *rest = ns.apply(elb.flow("warm-reuse", elb.search_id(1)))
    assert first.allowed and first.reason == "holder_setup"  # part of the holder's submit
    assert not any(d.allowed for d in rest) and rest[0].reason == "ceiling"


def test_warm_reuse_at_ceiling_minus_one_passes_end_to_end_and_counts_once() -> None:
    ns = busy(2)
    decisions = ns.apply(elb.flow("warm-reuse", elb.search_id(1)))
    assert [d.reason for d in decisions] == ["holder_setup", "ok", "joins_active", "joins_active", "joins_active"]


def test_cloud_job_submission_batch_jobs_pass_under_the_in_cluster_account_without_a_lease() -> None:
    ns = busy(2)
    job_id = elb.search_id(1)
    assert all(d.allowed for d in ns.apply(elb.flow("cloud-job-submission", job_id)))
    ns.lease = None  # the submitter released the Lease after submit() returned
    ns.jobs.append(elb.blast_batch(elb.search_id(103), 0, "other-db-3"))  # now at the ceiling
    batches = [elb.blast_batch(job_id, n) for n in range(3)]
    assert [d.reason for d in ns.apply(batches, IN_CLUSTER)] == ["joins_active"] * 3


def test_a_setup_job_of_a_new_search_needs_the_lease() -> None:
    ns = busy(0)
    decision = ns.judge(elb.init_ssd(elb.search_id(1), 0), BOB)
    assert (decision.allowed, decision.code, decision.reason) == (False, 403, "not_holder")


def test_import_queries_needs_the_lease_but_no_slot() -> None:
    ns = busy(3)
    assert not ns.judge(elb.import_queries(), BOB).allowed
    assert ns.judge(elb.import_queries(), ALICE).reason == "holder_setup"


def test_the_other_init_jobs_of_a_cold_search_join_the_search_the_first_one_opened() -> None:
    ns = busy(2)
    job_id = elb.search_id(1)
    decisions = ns.apply([elb.init_ssd(job_id, n) for n in range(4)])
    assert [d.reason for d in decisions] == ["ok", "joins_active", "joins_active", "joins_active"]


def test_a_prepare_only_search_stops_counting_when_its_setup_jobs_finish() -> None:
    ns = busy(2)
    job_id = elb.search_id(1)
    assert all(d.allowed for d in ns.apply(elb.flow("prepare-only", job_id)))
    assert ns.judge(elb.submit_jobs(elb.search_id(2))).reason == "ceiling"
    ns.finish(job_id)
    assert ns.judge(elb.submit_jobs(elb.search_id(2))).allowed


def test_a_search_job_running_several_pods_is_refused_with_422() -> None:
    body = elb.blast_batch(elb.search_id(1), 0)
    body["spec"]["completions"] = 5
    decision = busy(0).judge(body)
    assert (decision.allowed, decision.code, decision.reason) == (False, 422, "multi_pod_job")
    assert "completions=5" in decision.message and "spec.completions unset or 1" in decision.message


def test_a_work_queue_search_job_is_refused_too() -> None:
    body = elb.blast_batch(elb.search_id(1), 0)
    del body["spec"]["completions"]
    body["spec"]["parallelism"] = 4
    decision = busy(0).judge(body)
    assert decision.reason == "multi_pod_job" and "work-queue Job" in decision.message
