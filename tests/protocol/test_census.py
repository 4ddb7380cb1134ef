"""The census table: every rule of docs/design.md, "Census", one row each."""

from __future__ import annotations

import pytest

from elbgate.census import CensusMemo, JobRef, census, is_terminal
from testbed import elastic_blast as elb
from tests.builders import NOW, job

GRACE = 300


@pytest.mark.parametrize(
    ("status", "terminal"),
    [
        ({}, False),
        ({"active": 1}, False),
        ({"succeeded": 1}, True),
        ({"succeeded": 0}, False),
        ({"completionTime": "2026-11-29T11:00:00Z"}, True),
        ({"failed": 3}, False),  # a bare failed > 0 is still active: the Job may retry
        ({"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}, True),
        ({"conditions": [{"type": "Complete", "status": "True"}]}, True),
        ({"conditions": [{"type": "Complete", "status": "False"}]}, False),
        ({"conditions": [{"type": "Suspended", "status": "True"}]}, False),
        ({"conditions": ["garbage", {"type": "Failed"}]}, False),
        ({"succeeded": "1"}, False),  # wrongly typed counts are not proof of completion
    ],
)
def test_terminal_test_matches_the_existing_clients(status: dict, terminal: bool) -> None:
    assert is_terminal({"status": status}) is terminal


CASES = [
    # (description, jobs, active ids, orphan names)
    ("an empty namespace has no active search", [], [], []),
    (
        "an unfinished batch job makes its search active",
        [job("blast", "a")],
        ["a"],
        [],
    ),
    (
        "an unfinished submit job makes its search active",
        [job("submit", "a")],
        ["a"],
        [],
    ),
    (
        "jobs of one search count once",
        [
            job("submit", "a"),
            job("blast", "a", "b1"),
            job("blast", "a", "b2"),
            job("finalizer", "a"),
        ],
        ["a"],
        [],
    ),
    (
        "completed jobs do not count",
        [job("blast", "a").complete(), job("finalizer", "a").complete()],
        [],
        [],
    ),
    (
        "completionTime alone makes a job terminal",
        [job("blast", "a").with_status(completionTime="2026-11-29T11:00:00Z")],
        [],
        [],
    ),
    (
        "a batch job that failed but may retry is still active",
        [job("blast", "a").failed_but_retrying()],
        ["a"],
        [],
    ),
    (
        "a batch job with a Failed condition is terminal",
        [job("blast", "a").failed_condition()],
        [],
        [],
    ),
    (
        "a finalizer with unfinished companions is live whatever its age",
        [job("finalizer", "a").aged(10_000), job("blast", "a")],
        ["a"],
        [],
    ),
    (
        "a lone finalizer younger than the grace is an active search",
        [job("finalizer", "a").aged(GRACE - 1)],
        ["a"],
        [],
    ),
    (
        "a lone finalizer at the grace is an orphan holding no slot",
        [job("finalizer", "a").aged(GRACE)],
        [],
        ["finalizer-a"],
    ),
    (
        "a lone finalizer older than the grace is an orphan",
        [job("finalizer", "a").aged(GRACE * 10)],
        [],
        ["finalizer-a"],
    ),
    (
        "a finalizer whose batch work is done holds no slot and is no orphan (it is merging)",
        [job("finalizer", "a").aged(GRACE + 5), job("blast", "a").complete()],
        [],
        [],
    ),
    (
        "a finalizer whose batch work failed for good holds no slot and is no orphan",
        [job("finalizer", "a").aged(GRACE + 5), job("submit", "a").failed_condition()],
        [],
        [],
    ),
    (
        "another search's finished batch work does not save an orphan",
        [job("finalizer", "a").aged(GRACE + 5), job("blast", "b").complete()],
        [],
        ["finalizer-a"],
    ),
    (
        "a lone finalizer of unknown age is live",
        [job("finalizer", "a").aged(None)],
        ["a"],
        [],
    ),
    (
        "a finalizer with an unparseable creation time is live",
        [job("finalizer", "a").created("not-a-time")],
        ["a"],
        [],
    ),
    (
        "an unlabelled finalizer counts as its own search",
        [job("finalizer", None, "elb-finalizer-1"), job("finalizer", None, "elb-finalizer-2")],
        ["finalizer/elb-finalizer-1", "finalizer/elb-finalizer-2"],
        [],
    ),
    (
        "an old unlabelled finalizer is an orphan",
        [job("finalizer", None, "elb-finalizer-1").aged(GRACE + 1)],
        [],
        ["elb-finalizer-1"],
    ),
    (
        "an unlabelled batch job counts as its own search",
        [job("blast", None, "stray")],
        ["blast/stray"],
        [],
    ),
    (
        "jobs of other apps are ignored",
        [job("elb-db-warmup", "a"), job("web", "b")],
        [],
        [],
    ),
    (
        "three searches are three",
        [job("blast", "a"), job("submit", "b"), job("finalizer", "c")],
        ["a", "b", "c"],
        [],
    ),
]


@pytest.mark.parametrize(("case", "jobs", "active", "orphans"), CASES, ids=[c[0] for c in CASES])
def test_census(case: str, jobs: list, active: list[str], orphans: list[str]) -> None:
    result = census([j.build() for j in jobs], NOW, GRACE)
    assert list(result.active_ids) == active
    assert result.count == len(active)
    assert [o.name for o in result.orphans] == orphans


def _stored(body: dict, version: int) -> dict:
    """``body`` as the API server returns it: with a uid and a resourceVersion."""
    name = body["metadata"]["name"]
    body["metadata"] |= {"uid": f"uid-{name}", "resourceVersion": str(version)}
    return body


@pytest.mark.parametrize(("case", "jobs", "active", "orphans"), CASES, ids=[c[0] for c in CASES])
def test_a_census_read_through_a_memo_is_the_same_census(
    case: str, jobs: list, active: list[str], orphans: list[str]
) -> None:
    bodies = [_stored(j.build(), 100 + i) for i, j in enumerate(jobs)]
    memo = CensusMemo()
    fresh = census(bodies, NOW, GRACE)
    assert census(bodies, NOW, GRACE, memo=memo) == fresh  # read into the memo
    assert census(bodies, NOW, GRACE, memo=memo) == fresh  # read from it


def test_a_memo_reads_each_stored_version_once_and_a_new_version_again() -> None:
    memo = CensusMemo()
    batch = _stored(job("blast", "a").build(), 7)
    assert census([batch], NOW, GRACE, memo=memo).active_ids == ("a",)
    # The same version again is not read again (a stored version never changes) ...
    batch["status"] = {"succeeded": 1}
    assert census([batch], NOW, GRACE, memo=memo).active_ids == ("a",)
    # ... the version the API server stores with the change is.
    batch["metadata"]["resourceVersion"] = "8"
    assert census([batch], NOW, GRACE, memo=memo).active_ids == ()


def test_a_job_without_uid_or_version_is_read_every_time() -> None:
    memo = CensusMemo()
    batch = job("blast", "a").build()
    assert census([batch], NOW, GRACE, memo=memo).active_ids == ("a",)
    batch["status"] = {"succeeded": 1}
    assert census([batch], NOW, GRACE, memo=memo).active_ids == ()
    assert len(memo) == 0


def test_a_memo_keeps_at_most_its_size_dropping_the_least_lately_read() -> None:
    memo = CensusMemo(size=2)
    a, b, c = (_stored(job("blast", x).build(), 1) for x in "abc")
    census([a, b], NOW, GRACE, memo=memo)
    census([a], NOW, GRACE, memo=memo)  # a read again: b is now the least lately read
    census([c], NOW, GRACE, memo=memo)
    assert len(memo) == 2
    for body in (a, b, c):
        body["status"] = {"succeeded": 1}
    # a is remembered unfinished; b was dropped, so it is read (finished) again.
    assert census([a], NOW, GRACE, memo=memo).active_ids == ("a",)
    assert census([b], NOW, GRACE, memo=memo).active_ids == ()


def test_each_active_search_says_why_it_counts() -> None:
    result = census([job("blast", "a").build(), job("finalizer", "b").aged(20).build()], NOW, GRACE)
    reasons = {s.key: s.reason for s in result.active}
    assert "blast/blast-a" in reasons["a"]
    assert reasons["b"] == "finalizer finalizer-b live (20s old < 5m0s grace)"


def test_orphans_carry_what_the_controller_needs_to_act_safely() -> None:
    raw = job("finalizer", "a").aged(GRACE + 1).build()
    raw["metadata"].update(
        uid="u-1",
        resourceVersion="42",
        annotations={"elb-gate.io/orphaned-since": "2026-11-29T11:00:00Z"},
    )
    (orphan,) = census([raw], NOW, GRACE).orphans
    assert (orphan.uid, orphan.resource_version, orphan.job_id) == ("u-1", "42", "a")
    assert orphan.orphaned_since == "2026-11-29T11:00:00Z"


def test_is_active_answers_for_one_id() -> None:
    result = census([job("blast", "a").build()], NOW, GRACE)
    assert result.is_active("a")
    assert not result.is_active("b")


def test_a_finalizer_merging_after_its_batch_work_is_finishing_not_orphaned() -> None:
    jobs = [job("finalizer", "a").aged(GRACE * 20).build(), job("blast", "a").complete().build()]
    result = census(jobs, NOW, GRACE)
    assert [r.name for r in result.finishing] == ["finalizer-a"]
    assert result.orphans == ()
    assert result.count == 0


def test_batch_work_known_only_by_id_makes_a_finalizer_finishing() -> None:
    # The controller's cache keeps the ids of finished batch work, not the Jobs.
    lone = [job("finalizer", "a").aged(GRACE + 1).build()]
    assert [r.name for r in census(lone, NOW, GRACE).orphans] == ["finalizer-a"]
    result = census(lone, NOW, GRACE, batch_work_ids={"a"})
    assert ([r.name for r in result.finishing], result.orphans) == (["finalizer-a"], ())


# -- the whole job graph: setup Jobs, databases, Job status ---------------------------------


def test_a_setup_job_with_an_id_makes_its_search_active_and_keeps_its_finalizer_live() -> None:
    seen = census([elb.init_ssd("s1", 0), job("finalizer", "s1").aged(3600).build()], NOW, GRACE)
    assert seen.active_ids == ("s1",)
    assert "setup/init-ssd-s1-0" in seen.active[0].reason
    assert seen.orphans == ()


def test_a_setup_job_without_an_id_is_no_search_but_is_unfinished_work() -> None:
    seen = census([elb.import_queries(), elb.cloud_split()], NOW, GRACE)
    assert seen.count == 0
    assert sorted(r.name for r in seen.unfinished) == ["cloud-split-ssd", "import-queries"]


def test_staging_names_each_database_and_who_stages_it() -> None:
    seen = census(
        [
            elb.init_ssd("s1", 0, "core_nt"),
            elb.init_ssd("s1", 1, "core_nt"),
            elb.init_pv(None, "swissprot"),
            elb.blast_batch("s2", 0, "16S_ribosomal_RNA"),
        ],
        NOW,
        GRACE,
    )
    assert [(s.db, s.key, len(s.jobs)) for s in seen.staging] == [
        ("core_nt", "s1", 2),
        ("swissprot", "setup/init-pv", 1),
    ]
    assert seen.search("s1") is not None and seen.search("s1").stages == ("core_nt",)  # type: ignore[union-attr]
    assert seen.search("s2").uses == ("16S_ribosomal_RNA",)  # type: ignore[union-attr]
    assert seen.search("s2").stages == ()  # type: ignore[union-attr]


def test_a_search_seen_only_through_submit_and_finalizer_uses_no_known_database() -> None:
    seen = census([elb.submit_jobs("s3"), elb.finalizer("s3")], NOW, GRACE)
    assert seen.search("s3").uses == ()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("status", "counts"),
    [
        ({"succeeded": 1, "active": 2}, True),
        ({"succeeded": 3}, False),
        (
            {
                "succeeded": 3,
                "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}],
                "terminating": 1,
            },
            True,
        ),
    ],
    ids=[
        "completions 3 with one success still counts",
        "all three succeeded",
        "decided but a pod still terminates",
    ],
)
def test_a_multi_pod_job_counts_until_the_job_controller_says_it_is_done(
    status: dict, counts: bool
) -> None:
    body = job("blast", "m").build()
    body["spec"] = {"completions": 3, "parallelism": 3}
    body["status"] = status
    assert census([body], NOW, GRACE).is_active("m") is counts


def test_a_suspended_job_keeps_its_slot_and_says_so() -> None:
    body = (
        job("blast", "p").with_status(conditions=[{"type": "Suspended", "status": "True"}]).build()
    )
    seen = census([body], NOW, GRACE)
    assert seen.is_active("p")
    assert seen.active[0].jobs[0].suspended


def test_job_refs_carry_terminating_pods_and_databases() -> None:
    body = elb.blast_batch("s", 1, "core_nt")
    body["status"] = {"active": 0, "terminating": 2}
    ref = JobRef.from_dict(body)
    assert (ref.terminating, ref.uses, ref.stages) == (2, ("core_nt",), ())
