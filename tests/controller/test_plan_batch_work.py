"""Durable evidence of batch work: the record on the finalizer, and why it keeps a
finishing finalizer from ever being called an orphan — after its batch Jobs are TTL-deleted,
after a controller restart, under either orphan policy.

The "cluster" here is the controller's own cache fed the way its watches feed it (a LIST,
then ADDED/MODIFIED/DELETED events), so the restart and TTL cases run through the same code
as production; the objects are ElasticBLAST's (a ``submit-jobs-<id>`` Job creating
``blastn-batch-…`` Jobs, then ``elb-finalizer-<id>``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from controller.actions import DeleteOrphan, MarkOrphan, RecordBatchWork, UnmarkOrphan
from controller.batch_work import plan_batch_work_records, record_value
from controller.cache import Cache, Kind
from controller.plan import Plan, make_plan
from elbgate.census import JobRef
from elbgate.lease import format_microtime
from elbgate.names import BATCH_WORK_SEEN_ANNOTATION, ORPHANED_SINCE_ANNOTATION
from elbgate.settings import ControllerSettings, GateSettings
from tests.builders import NOW, NS, ago, job_doc, sections, snapshot

SEARCH = "9b2f6e1c-4d7a-4e0b-8c3f-5a6d7e8f9a0b"
FIN = "elb-finalizer-9b2f6e1c"
SUBMIT = "submit-jobs-9b2f6e1c"
BATCH = "blastn-batch-nt-job-1-9b2f6e1c"
RECORDED = f"{format_microtime(ago(2400))} blast/{BATCH}"


def fin(**kw: Any) -> dict[str, Any]:
    kw.setdefault("job_id", SEARCH)
    return job_doc(FIN, app="finalizer", **kw)


def batch(name: str = BATCH, app: str = "blast", **kw: Any) -> dict[str, Any]:
    kw.setdefault("job_id", SEARCH)
    return job_doc(name, app=app, **kw)


# --- the record ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    jobs: list[dict[str, Any]]
    seen: str | None
    """What the record names, or ``None`` for no record."""


CASES = [
    Case("a running batch Job of its search", [fin(age=30), batch()], f"blast/{BATCH}"),
    Case(
        "only the finished in-cluster submit Job (cloud submission)",
        [fin(age=30), batch(SUBMIT, app="submit", finished=True)],
        f"submit/{SUBMIT}",
    ),
    Case(
        "only the search's setup Job (created before its batch Jobs)",
        [fin(age=30), batch("init-pv", app="setup", finished=True)],
        "setup/init-pv",
    ),
    Case(
        "a running Job is named before a finished one",
        [fin(age=30), batch(SUBMIT, app="submit", finished=True), batch()],
        f"blast/{BATCH}",
    ),
    Case("batch work of another search", [fin(age=30), batch(job_id="other")], None),
    Case("no batch work in view", [fin(age=30)], None),
    Case("already recorded", [fin(batch_work_seen=RECORDED), batch()], None),
    Case("a finished finalizer", [fin(finished=True), batch()], None),
    Case(
        "a finalizer without elb-job-id",
        [job_doc("elb-finalizer-x", app="finalizer", job_id=None), batch(job_id=None)],
        None,
    ),
    Case(
        "a warm-reuse import-queries setup Job has no elb-job-id",
        [fin(age=30), job_doc("import-queries", app="setup", job_id=None)],
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_first_sighting_of_batch_work_is_recorded_on_the_finalizer(case: Case) -> None:
    plan = make_plan(snapshot(jobs=case.jobs), {}, None, NOW, *sections())
    records = [a for a in plan.actions if isinstance(a, RecordBatchWork)]
    assert [r.seen for r in records] == ([case.seen] if case.seen else [])
    for r in records:
        assert (r.job.name, r.since, r.job.resource_version) == (FIN, NOW, "7")


def test_the_record_names_the_time_and_the_job() -> None:
    assert record_value(NOW, "blast/b") == "2026-11-29T12:00:00.000000Z blast/b"


def test_records_only_ever_go_to_unrecorded_unfinished_finalizers() -> None:
    refs = [JobRef.from_dict(d) for d in (fin(), batch(), fin(batch_work_seen=RECORDED))]
    got = plan_batch_work_records(refs, {SEARCH: f"blast/{BATCH}"}, NOW)
    assert [(r.job.name, r.job.batch_work_seen) for r in got] == [(FIN, "")]


# --- finishing, never an orphan ---------------------------------------------------------


def feed(cache: Cache, *docs: dict[str, Any], record: dict[str, Any] | None = None) -> None:
    """A fresh LIST of ``docs`` (what a controller sees when it starts), and of the
    webhook's admission record when given."""
    cache.replace(Kind.JOBS, NS, list(docs))
    cache.replace(Kind.LEASES, NS, [])
    cache.replace(Kind.CONFIGMAPS, NS, [])
    cache.replace(Kind.ADMISSIONS, NS, [record] if record else [])


def orphan_actions(plan: Plan) -> list[str]:
    return [
        type(a).__name__
        for a in plan.actions
        if isinstance(a, MarkOrphan | UnmarkOrphan | DeleteOrphan | RecordBatchWork)
    ]


def annotated(doc: dict[str, Any], key: str, value: str, rv: str) -> dict[str, Any]:
    out = {**doc, "metadata": {**doc["metadata"], "resourceVersion": rv}}
    out["metadata"]["annotations"] = {**(doc["metadata"].get("annotations") or {}), key: value}
    return out


POLICIES = [sections(), sections(orphan_policy="delete", orphan_delete_after_seconds=0)]


@pytest.mark.parametrize("policy", POLICIES, ids=["policy warn", "policy delete"])
def test_a_finalizer_whose_batch_jobs_were_ttl_deleted_is_finishing(
    policy: tuple[GateSettings, ControllerSettings],
) -> None:
    # The search ran: submit-jobs, then a batch Job, then the finalizer (created last).
    cache = Cache([NS])
    start = fin(age=2400)
    feed(cache, batch(SUBMIT, app="submit", finished=True), batch(finished=True), start)
    first = make_plan(cache.snapshot(NS), {}, None, NOW, *policy)
    (record,) = [a for a in first.actions if isinstance(a, RecordBatchWork)]
    # The CAS write lands; the watch brings it back.
    cache.apply(
        Kind.JOBS,
        NS,
        "MODIFIED",
        annotated(start, BATCH_WORK_SEEN_ANNOTATION, record_value(NOW, record.seen), "8"),
    )
    # ttl-after-finished deletes both batch Jobs (1800 s after they finished).
    for name, app in ((SUBMIT, "submit"), (BATCH, "blast")):
        cache.apply(Kind.JOBS, NS, "DELETED", batch(name, app=app, finished=True))
    # An hour later the finalizer is still merging: finishing, not an orphan, untouched.
    later = NOW + timedelta(hours=1)
    plan = make_plan(cache.snapshot(NS), {}, None, later, *policy)
    assert [j.name for j in plan.census.finishing] == [FIN]
    assert plan.census.orphans == () and plan.census.count == 0
    assert orphan_actions(plan) == []
    assert plan.liveness.in_use  # a finishing finalizer is never scaled away


@pytest.mark.parametrize("policy", POLICIES, ids=["policy warn", "policy delete"])
def test_after_a_restart_the_record_on_the_finalizer_is_all_the_evidence_needed(
    policy: tuple[GateSettings, ControllerSettings],
) -> None:
    # A new controller (restart, or another replica taking over) lists the namespace after
    # the batch Jobs were TTL-deleted: only the recorded finalizer is left to see.
    cache = Cache([NS])
    feed(cache, fin(age=5000, batch_work_seen=RECORDED))
    plan = make_plan(cache.snapshot(NS), {}, None, NOW, *policy)
    assert [j.name for j in plan.census.finishing] == [FIN]
    assert plan.census.orphans == ()
    assert orphan_actions(plan) == []


def test_without_the_record_the_same_restart_would_call_it_an_orphan() -> None:
    # The case the record exists for: same finalizer, no record, no batch Jobs in view.
    cache = Cache([NS])
    feed(cache, fin(age=5000))
    plan = make_plan(cache.snapshot(NS), {}, None, NOW, *sections())
    assert [j.name for j in plan.census.orphans] == [FIN]
    assert orphan_actions(plan) == ["MarkOrphan"]


@pytest.mark.parametrize("policy", POLICIES, ids=["policy warn", "policy delete"])
def test_the_admission_records_evidence_makes_an_unseen_finalizer_finishing_and_is_copied_onto_it(
    policy: tuple[GateSettings, ControllerSettings],
) -> None:
    # The controller never saw the batch Jobs (it was down while they ran, finished and
    # were TTL-deleted): the webhook recorded the batch work when it admitted it.
    record = {
        "metadata": {"name": "elb-gate-admissions", "resourceVersion": "9"},
        "data": {"batch-work.json": json.dumps({SEARCH: RECORDED})},
    }
    cache = Cache([NS])
    feed(cache, fin(age=5000), record=record)
    plan = make_plan(cache.snapshot(NS), {}, None, NOW, *policy)
    assert [j.name for j in plan.census.finishing] == [FIN]
    assert plan.census.orphans == ()
    assert orphan_actions(plan) == ["RecordBatchWork"]
    (recorded,) = [a for a in plan.actions if isinstance(a, RecordBatchWork)]
    assert recorded.seen == f"blast/{BATCH}"


def test_an_unreadable_admission_record_is_no_evidence() -> None:
    record = {"metadata": {"name": "elb-gate-admissions"}, "data": {"batch-work.json": "{x"}}
    cache = Cache([NS])
    feed(cache, fin(age=5000), record=record)
    plan = make_plan(cache.snapshot(NS), {}, None, NOW, *sections())
    assert [j.name for j in plan.census.orphans] == [FIN]


def test_a_marked_orphan_whose_batch_work_appears_is_recorded_and_unmarked_in_one_write() -> None:
    cache = Cache([NS])
    feed(cache, fin(age=600, orphaned_since=ago(200)), batch())
    plan = make_plan(cache.snapshot(NS), {}, None, NOW, *sections(orphan_policy="delete"))
    assert orphan_actions(plan) == ["RecordBatchWork"]
    (record,) = [a for a in plan.actions if isinstance(a, RecordBatchWork)]
    assert record.job.orphaned_since  # the applier drops the mark in the same patch


def test_a_recorded_finalizer_with_an_orphan_mark_from_before_is_unmarked() -> None:
    cache = Cache([NS])
    marked = annotated(fin(age=5000, batch_work_seen=RECORDED), ORPHANED_SINCE_ANNOTATION, "x", "9")
    feed(cache, marked)
    plan = make_plan(cache.snapshot(NS), {}, None, NOW, *sections(orphan_policy="delete"))
    assert orphan_actions(plan) == ["UnmarkOrphan"]


def test_an_orphan_is_a_finalizer_whose_batch_work_never_appeared_within_the_grace() -> None:
    young = make_plan(snapshot(jobs=[fin(age=299)]), {}, None, NOW, *sections())
    assert young.census.active_ids == (SEARCH,) and orphan_actions(young) == []
    old = make_plan(snapshot(jobs=[fin(age=301)]), {}, None, NOW, *sections())
    assert [j.name for j in old.census.orphans] == [FIN]
    assert orphan_actions(old) == ["MarkOrphan"]


# --- when to look again ------------------------------------------------------------------


def test_a_young_lone_finalizer_is_looked_at_again_when_its_grace_ends() -> None:
    plan = make_plan(snapshot(jobs=[fin(age=100)]), {}, None, NOW, *sections())
    assert plan.look_again_at == ago(100) + timedelta(seconds=300)


def test_a_flagged_orphan_is_looked_at_again_when_its_delete_grace_ends() -> None:
    snap = snapshot(jobs=[fin(age=5000, orphaned_since=ago(100))])
    deleting = make_plan(snap, {}, None, NOW, *sections(orphan_policy="delete"))
    assert deleting.look_again_at == ago(100) + timedelta(seconds=900)
    warning = make_plan(snap, {}, None, NOW, *sections())
    assert warning.look_again_at is None  # policy warn: nothing falls due


def test_the_earliest_deadline_wins() -> None:
    snap = snapshot(jobs=[fin(age=290), job_doc("elb-finalizer-b", job_id="b", age=100)])
    plan = make_plan(snap, {}, None, NOW, *sections())
    assert plan.look_again_at == ago(290) + timedelta(seconds=300)
