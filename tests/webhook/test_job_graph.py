"""The real ElasticBLAST job graph through search admission, flow by flow.

Every flow (cold local SSD, cold persistent volume, partitioned, sharded, warm
reuse, cloud job submission, prepare only) is played Job by Job with the
templates' shapes: admitted under the ceiling, refused at its first Job at the
ceiling with nothing of it left behind.
"""

from __future__ import annotations

import pytest

from elbgate.census import Census, census
from elbgate.settings import Settings
from testbed import elastic_blast as elb
from tests.builders import NOW, user
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
    assert [d.reason for d in decisions] == [
        "holder_setup",
        "ok",
        "joins_active",
        "joins_active",
        "joins_active",
    ]


def test_cloud_job_submission_batch_jobs_pass_under_the_in_cluster_account_without_a_lease() -> (
    None
):
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


# -- one staging per database ---------------------------------------------------------------

S1, S2, S3 = elb.search_id(1), elb.search_id(2), elb.search_id(3)


def staging(db: str = "core_nt") -> Namespace:
    """S1 is staging ``db`` on a cold cluster (its init-ssd Jobs run)."""
    ns = busy(0)
    assert all(d.allowed for d in ns.apply([elb.init_ssd(S1, n, db) for n in range(3)]))
    return ns


def test_a_second_cold_search_of_the_same_database_waits_for_the_staging() -> None:
    ns = staging("core_nt")
    before = ns.names()
    decisions = ns.apply(elb.flow("cold-local-ssd", S2, "core_nt"))
    assert not any(d.allowed for d in decisions) and ns.names() == before
    first = decisions[0]
    assert (first.code, first.reason) == (429, "db_staging")
    for phrase in (
        "DB staging:",
        f"would stage database core_nt, which {S1} is staging already",
        f"init-ssd-{S1[-8:]}-0, init-ssd-{S1[-8:]}-1, init-ssd-{S1[-8:]}-2",
        f"kubectl get jobs -n default -l app=setup,elb-job-id={S1}",
    ):
        assert phrase in first.message


def test_different_databases_stage_in_parallel() -> None:
    ns = staging("core_nt")
    assert all(d.allowed for d in ns.apply(elb.flow("cold-local-ssd", S2, "swissprot")))


def test_a_warm_search_of_a_database_being_staged_is_refused_at_its_first_batch_job() -> None:
    ns = staging("core_nt")
    decision = ns.judge(elb.blast_batch(S2, 0, "core_nt"))
    assert decision.reason == "db_staging"
    assert "database core_nt is being staged by" in decision.message
    assert "would read a half-copied database" in decision.message


def test_a_search_naming_no_database_waits_while_any_database_is_staged() -> None:
    ns = staging("core_nt")
    decision = ns.judge(elb.submit_jobs(S2))
    assert decision.reason == "db_staging" and "names no database" in decision.message
    ns.finish_setup(S1)
    assert ns.judge(elb.submit_jobs(S2)).allowed


def test_staging_a_database_under_a_running_search_is_refused() -> None:
    ns = busy(0)
    ns.apply([elb.blast_batch(S1, 0, "core_nt"), elb.finalizer(S1)])
    decision = ns.judge(elb.init_ssd(S2, 0, "core_nt"))  # e.g. elastic-blast prepare
    assert decision.reason == "db_staging"
    assert f"while active search {S1} uses it" in decision.message
    assert f"Retry when {S1} completes" in decision.message


def test_a_staged_database_stays_in_use_between_its_setup_and_its_batch_jobs() -> None:
    # Cloud job submission: S1's init-ssd Jobs complete, then its submit-jobs pod
    # creates the batch Jobs. In between, S1's only live Job names no database, yet
    # S1 reads core_nt: a second staging of it then would be under S1's batch Jobs
    # (which, created in-cluster, nobody retries).
    ns = busy(0)
    cold = [elb.init_ssd(S1, n, "core_nt") for n in range(3)] + [elb.submit_jobs(S1)]
    assert all(d.allowed for d in ns.apply(cold))
    ns.finish_setup(S1)
    decision = ns.judge(elb.init_ssd(S2, 0, "core_nt"))
    assert (decision.code, decision.reason) == (429, "db_staging")
    assert f"while active search {S1} uses it" in decision.message
    assert ns.judge(elb.blast_batch(S1, 0, "core_nt"), IN_CLUSTER).reason == "joins_active"
    assert ns.judge(elb.init_ssd(S2, 0, "swissprot")).allowed  # another database proceeds


def test_batch_jobs_created_in_cluster_wait_while_their_database_is_staged_by_another_search() -> (
    None
):
    ns = busy(0)
    assert all(d.allowed for d in ns.apply(elb.flow("cloud-job-submission", S1)))
    assert all(d.allowed for d in ns.apply([elb.init_pv(S2, "16S_ribosomal_RNA")]))
    decision = ns.judge(elb.blast_batch(S1, 0, "16S_ribosomal_RNA"), IN_CLUSTER)
    assert decision.reason == "db_staging"
    ns.finish_setup(S2)
    assert (
        ns.judge(elb.blast_batch(S1, 0, "16S_ribosomal_RNA"), IN_CLUSTER).reason == "joins_active"
    )


def test_a_search_staging_its_own_database_is_not_blocked_by_itself() -> None:
    ns = busy(0)
    decisions = ns.apply(elb.flow("cold-pv", S1, "16S_ribosomal_RNA"))
    assert all(d.allowed for d in decisions)


def test_the_rule_can_be_turned_off_or_to_warn() -> None:
    ns = staging("core_nt")
    ns.settings = Settings.of(db_staging="off")
    assert ns.judge(elb.init_ssd(S2, 0, "core_nt")).allowed
    ns = staging("core_nt")
    ns.settings = Settings.of(db_staging="warn")
    decision = ns.judge(elb.init_ssd(S2, 0, "core_nt"))
    assert decision.allowed and [w.reason for w in decision.warned] == ["db_staging"]
    response = decision.response()
    assert response.allowed and response.warnings
    assert response.warnings[0].startswith("search-admission.elb-gate.io would deny: DB staging:")


def test_a_burst_of_ten_searches_over_two_databases_never_overlaps_a_staging() -> None:
    """Ten cold searches, alternating two databases, retried until all ran: a
    database is never staged while another search uses it, and the peak never
    exceeds the ceiling."""
    ns = busy(0)
    dbs = {elb.search_id(i): ("core_nt", "swissprot")[i % 2] for i in range(10)}
    waiting = list(dbs)
    progress: dict[str, int] = {}
    peak = 0
    for _round in range(200):
        for job_id in list(waiting):
            decisions = ns.apply(elb.flow("cold-local-ssd", job_id, dbs[job_id]))
            if decisions[0].allowed:
                assert all(d.allowed for d in decisions)
                waiting.remove(job_id)
                progress[job_id] = 0
        for job_id in list(progress):
            progress[job_id] += 1
            if progress[job_id] == 2:
                ns.finish_setup(job_id)
            elif progress[job_id] == 4:
                ns.finish(job_id)
                del progress[job_id]
        seen = survey_of(ns)
        peak = max(peak, seen.count)
        assert seen.count <= ns.settings.gate.max_run_concurrency
        for stage in seen.staging:
            users = [a.key for a in seen.active if a.key != stage.key and stage.db in a.uses]
            assert users == [], (stage.db, stage.key, users)
        if not waiting and not progress:
            break
    assert not waiting and not progress and peak >= 2


def survey_of(ns: Namespace) -> Census:
    return census(ns.jobs, NOW, ns.settings.gate.finalizer_grace_seconds)
