"""Plan tables: orphaned finalizers are marked, warned about, left (policy warn, the
default) or deleted (policy delete), and un-marked when they stop being orphans."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.actions import DeleteOrphan, MarkOrphan, RecordBatchWork, UnmarkOrphan
from controller.plan import make_plan
from tests.builders import NOW, ago, job_doc, sections, snapshot

# Defaults: finalizer grace 300 s, policy warn; under policy delete, delete 900 s after
# orphaned-since.
DELETE = {"orphan_policy": "delete"}


@dataclass(frozen=True)
class Case:
    name: str
    jobs: list[dict[str, Any]]
    expected: list[tuple[str, str]]
    """(action type, job name) in plan order."""
    overrides: dict[str, Any] = field(default_factory=dict)


def fin(name: str = "fin-1", **kw: Any) -> dict[str, Any]:
    return job_doc(name, app="finalizer", **kw)


def blast(name: str = "blast-1", **kw: Any) -> dict[str, Any]:
    return job_doc(name, app="blast", **kw)


CASES = [
    Case("a lone finalizer older than the grace is marked", [fin(age=301)], [("Mark", "fin-1")]),
    Case("a lone finalizer inside the grace is live", [fin(age=299)], []),
    Case("a finalizer of unknown age is live", [fin(age=None)], []),
    Case(
        "a finalizer with an unfinished companion is live and gets its record",
        [fin(), blast()],
        [("Record", "fin-1")],
    ),
    Case(
        "a companion of another search does not keep it live",
        [fin(job_id="s1"), blast(job_id="s2")],
        [("Mark", "fin-1")],
    ),
    Case("a finished finalizer is not an orphan", [fin(finished=True)], []),
    Case(
        "a finalizer merging after its batch work finished is never marked",
        [fin(age=100_000), blast(finished=True)],
        [("Record", "fin-1")],
        DELETE,
    ),
    Case(
        "a marked finalizer whose finished batch work is seen is recorded (which un-marks)",
        [fin(orphaned_since=ago(100_000)), blast(finished=True)],
        [("Record", "fin-1")],
        DELETE,
    ),
    Case(
        "finished batch work of another search does not save an orphan",
        [fin(job_id="s1"), blast(job_id="s2", finished=True)],
        [("Mark", "fin-1")],
    ),
    Case(
        "an orphan whose batch work appears late is recorded, which un-marks it",
        [fin(orphaned_since=ago(100)), job_doc("submit-1", app="submit")],
        [("Record", "fin-1")],
    ),
    Case(
        "a recorded finalizer still carrying an old mark is un-marked",
        [fin(orphaned_since=ago(100), batch_work_seen="2026-11-29T11:00:00Z blast/b")],
        [("Unmark", "fin-1")],
        DELETE,
    ),
    Case(
        "a marked finalizer that finished is un-marked",
        [fin(orphaned_since=ago(100), finished=True)],
        [("Unmark", "fin-1")],
    ),
    Case(
        "a marked orphan inside the delete grace is left",
        [fin(orphaned_since=ago(899))],
        [],
        DELETE,
    ),
    Case(
        "a marked orphan at the delete grace is deleted",
        [fin(orphaned_since=ago(900))],
        [("Delete", "fin-1")],
        DELETE,
    ),
    Case("the default policy (warn) never deletes", [fin(orphaned_since=ago(100_000))], []),
    Case("the default policy (warn) still marks", [fin()], [("Mark", "fin-1")]),
    Case(
        "policy delete never deletes a recorded finalizer, however old and lone",
        [fin(age=100_000, batch_work_seen="2026-11-29T00:00:00Z submit/submit-jobs-1")],
        [],
        DELETE,
    ),
    Case(
        "an unparseable mark restarts the clock",
        [fin(orphaned_since="last tuesday")],
        [("Mark", "fin-1")],
    ),
    Case(
        "a shorter delete grace deletes sooner",
        [fin(orphaned_since=ago(61))],
        [("Delete", "fin-1")],
        {**DELETE, "orphan_delete_after_seconds": 60},
    ),
    Case(
        "two orphans of one search are each handled",
        [fin("fin-a"), fin("fin-b", orphaned_since=ago(1000))],
        [("Mark", "fin-a"), ("Delete", "fin-b")],
        DELETE,
    ),
]

KIND = {
    RecordBatchWork: "Record",
    MarkOrphan: "Mark",
    UnmarkOrphan: "Unmark",
    DeleteOrphan: "Delete",
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_orphan_table(case: Case) -> None:
    found = make_plan(snapshot(jobs=case.jobs), {}, None, NOW, *sections(**case.overrides))
    got = [
        (KIND[type(a)], a.job.name)
        for a in found.actions
        if isinstance(a, RecordBatchWork | MarkOrphan | UnmarkOrphan | DeleteOrphan)
    ]
    assert got == case.expected


def test_a_new_orphan_is_marked_with_the_time_it_was_found() -> None:
    found = make_plan(snapshot(jobs=[fin()]), {}, None, NOW, *sections(**DELETE))
    (mark,) = [a for a in found.actions if isinstance(a, MarkOrphan)]
    assert mark.since == NOW
    assert "will be deleted after 15m0s" in mark.message
    assert mark.job.resource_version == "7" and mark.job.uid == "uid-fin-1"


def test_the_warn_policy_says_so_in_the_warning() -> None:
    found = make_plan(snapshot(jobs=[fin()]), {}, None, NOW, *sections(orphan_policy="warn"))
    (mark,) = [a for a in found.actions if isinstance(a, MarkOrphan)]
    assert "will not be deleted" in mark.message
    # Durations as Kubernetes writes them, as everywhere else (docs/design.md).
    assert "older than the 5m0s finalizer grace" in mark.message


def test_a_delete_names_the_job_its_search_and_how_long_it_was_orphaned() -> None:
    snap = snapshot(jobs=[fin(orphaned_since=ago(1000))])
    found = make_plan(snap, {}, None, NOW, *sections(**DELETE))
    (delete,) = [a for a in found.actions if isinstance(a, DeleteOrphan)]
    assert "fin-1" in delete.message and "elb-job-id=s1" in delete.message
    assert "16m40s >= 15m0s" in delete.message


def test_orphans_hold_no_search_slot_in_the_census() -> None:
    found = make_plan(
        snapshot(jobs=[fin(), fin("fin-2", job_id="s2", age=10)]), {}, None, NOW, *sections()
    )
    assert found.census.active_ids == ("s2",)
    assert [j.name for j in found.census.orphans] == ["fin-1"]
