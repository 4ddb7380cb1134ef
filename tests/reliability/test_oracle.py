"""The suite's independent count of active searches: its definition, table by table,
and its agreement with elb-gate's census on every case (the observer compares the two
after every Job write of every schedule; these are the cases written down)."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from elbgate.census import census
from testbed.reliability import gate_a, oracle

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
GRACE = 300.0


def job(
    name: str,
    app: str | None,
    job_id: str | None = None,
    *,
    age: float | None = 10.0,
    status: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job as the API server returns it (labels on the Job and its template)."""
    labels = {k: v for k, v in (("app", app), ("elb-job-id", job_id)) if v is not None}
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels, "uid": f"u-{name}"}
    if age is not None:
        meta["creationTimestamp"] = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}}, **(spec or {})},
        "status": status or {},
    }


def cond(kind: str, status: str = "True") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": "Test"}


RUNNING = {"active": 1, "ready": 1}
SUCCEEDED = {
    "succeeded": 1,
    "completionTime": "2026-11-30T11:59:00Z",
    "conditions": [cond("SuccessCriteriaMet"), cond("Complete")],
}
FAILED = {"failed": 2, "conditions": [cond("FailureTarget"), cond("Failed")]}

CASES: list[tuple[str, list[dict[str, Any]], list[str]]] = [
    ("nothing", [], []),
    ("a running blast Job", [job("b", "blast", "s1", status=RUNNING)], ["s1"]),
    ("a succeeded blast Job", [job("b", "blast", "s1", status=SUCCEEDED)], []),
    (
        "succeeded > 0 alone finishes a one-pod Job",
        [job("b", "blast", "s1", status={"succeeded": 1})],
        [],
    ),
    (
        "a failed pod is retried: still active",
        [job("b", "blast", "s1", status={"failed": 1, "active": 1})],
        ["s1"],
    ),
    (
        "failed pods without a decision: still active",
        [job("b", "blast", "s1", status={"failed": 3})],
        ["s1"],
    ),
    ("a Failed condition finishes it", [job("b", "blast", "s1", status=FAILED)], []),
    (
        "a False Complete condition is nothing",
        [job("b", "blast", "s1", status={"conditions": [cond("Complete", "False")]})],
        ["s1"],
    ),
    (
        "completionTime finishes it",
        [job("b", "blast", "s1", status={"completionTime": "2026-11-30T11:59:00Z"})],
        [],
    ),
    (
        "decided, pods still terminating: active",
        [
            job(
                "b",
                "blast",
                "s1",
                status={"terminating": 1, "conditions": [cond("SuccessCriteriaMet")]},
            )
        ],
        ["s1"],
    ),
    (
        "decided, nothing terminating: finished",
        [
            job(
                "b",
                "blast",
                "s1",
                status={"terminating": 0, "conditions": [cond("SuccessCriteriaMet")]},
            )
        ],
        [],
    ),
    (
        "FailureTarget, nothing terminating: finished",
        [job("b", "blast", "s1", status={"failed": 1, "conditions": [cond("FailureTarget")]})],
        [],
    ),
    (
        "succeeded with pods terminating: active",
        [job("b", "blast", "s1", status={"succeeded": 1, "terminating": 1})],
        ["s1"],
    ),
    (
        "completions 3, one succeeded: active",
        [job("b", "blast", "s1", status={"succeeded": 1, "active": 2}, spec={"completions": 3})],
        ["s1"],
    ),
    (
        "completions 3, three succeeded: finished",
        [job("b", "blast", "s1", status={"succeeded": 3}, spec={"completions": 3})],
        [],
    ),
    (
        "work queue, one succeeded, one active: active",
        [job("b", "blast", "s1", status={"succeeded": 1, "active": 1}, spec={"parallelism": 2})],
        ["s1"],
    ),
    (
        "work queue, one succeeded, none active: finished",
        [job("b", "blast", "s1", status={"succeeded": 1}, spec={"parallelism": 2})],
        [],
    ),
    (
        "suspended: still active",
        [
            job(
                "b",
                "blast",
                "s1",
                status={"conditions": [cond("Suspended")]},
                spec={"suspend": True},
            )
        ],
        ["s1"],
    ),
    ("a young lone finalizer", [job("f", "finalizer", "s1", age=5, status=RUNNING)], ["s1"]),
    (
        "an old lone finalizer holds no slot",
        [job("f", "finalizer", "s1", age=900, status=RUNNING)],
        [],
    ),
    (
        "a finalizer just at the grace holds no slot",
        [job("f", "finalizer", "s1", age=GRACE, status=RUNNING)],
        [],
    ),
    ("a finalizer of unknown age", [job("f", "finalizer", "s1", age=None, status=RUNNING)], ["s1"]),
    (
        "an old finalizer with its submit Job running",
        [job("f", "finalizer", "s1", age=900), job("s", "submit", "s1", status=RUNNING)],
        ["s1"],
    ),
    (
        "an old finalizer, its batch done",
        [job("f", "finalizer", "s1", age=900), job("b", "blast", "s1", status=SUCCEEDED)],
        [],
    ),
    (
        "an old finalizer, another search running",
        [job("f", "finalizer", "s1", age=900), job("b", "blast", "s2", status=RUNNING)],
        ["s2"],
    ),
    ("a finished finalizer", [job("f", "finalizer", "s1", age=5, status=SUCCEEDED)], []),
    (
        "a young finalizer without elb-job-id is its own search",
        [job("f", "finalizer", None, age=5)],
        ["finalizer/f"],
    ),
    ("an empty elb-job-id is no id", [job("f", "finalizer", "", age=5)], ["finalizer/f"]),
    ("a submit Job without elb-job-id is its own search", [job("s", "submit", None)], ["submit/s"]),
    ("a setup Job without elb-job-id is no search", [job("i", "setup", None, status=RUNNING)], []),
    (
        "a setup Job with elb-job-id opens its search",
        [job("i", "setup", "s1", status=RUNNING)],
        ["s1"],
    ),
    (
        "a setup Job keeps its search's finalizer live",
        [job("i", "setup", "s1"), job("f", "finalizer", "s1", age=900)],
        ["s1"],
    ),
    (
        "one search of many Jobs is one",
        [
            job("i", "setup", "s1"),
            job("b1", "blast", "s1"),
            job("b2", "blast", "s1"),
            job("f", "finalizer", "s1"),
        ],
        ["s1"],
    ),
    (
        "other apps are not searches",
        [job("x", "elb-db-warmup", "s1"), job("y", "Finalizer", "s2"), job("z", None, "s3")],
        [],
    ),
    (
        "three searches",
        [job("a", "blast", "s1"), job("b", "submit", "s2"), job("c", "finalizer", "s3", age=1)],
        ["s1", "s2", "s3"],
    ),
]


@pytest.mark.parametrize(("what", "jobs", "active"), CASES, ids=[c[0] for c in CASES])
def test_the_oracle_counts_as_documented(
    what: str, jobs: list[dict[str, Any]], active: list[str]
) -> None:
    assert [a.key for a in oracle.active_searches(jobs, NOW, GRACE)] == active


@pytest.mark.parametrize(("what", "jobs", "active"), CASES, ids=[c[0] for c in CASES])
def test_the_census_agrees_with_the_oracle_on_every_documented_case(
    what: str, jobs: list[dict[str, Any]], active: list[str]
) -> None:
    assert list(census(jobs, NOW, GRACE).active_ids) == active


@pytest.mark.parametrize(("what", "jobs", "active"), CASES, ids=[c[0] for c in CASES])
def test_the_crude_bound_is_never_below_the_oracle(
    what: str, jobs: list[dict[str, Any]], active: list[str]
) -> None:
    assert oracle.crude_bound(jobs) >= set(active)


def test_the_crude_bound_counts_what_the_oracle_does_not() -> None:
    jobs = [
        job("f", "finalizer", "s1", age=900),  # past the grace
        job("b", "blast", "s2", status={"succeeded": 1}),  # no Complete condition yet
        job("c", "blast", "s3", status=SUCCEEDED),  # Complete: out of both
    ]
    assert oracle.crude_bound(jobs) == {"s1", "s2"}
    assert oracle.active_searches(jobs, NOW, GRACE) == []


def test_an_active_search_says_why_and_names_its_jobs() -> None:
    found = oracle.active_searches(
        [job("f", "finalizer", "s1", age=5), job("b", "blast", "s1")], NOW, GRACE
    )
    assert found == [oracle.Active("s1", "unfinished b", ("b", "f"))]


def test_unreadable_times_are_unknown_ages() -> None:
    broken = job("f", "finalizer", "s1")
    broken["metadata"]["creationTimestamp"] = "yesterday"
    assert oracle.created_at(broken) is None
    assert [a.key for a in oracle.active_searches([broken], NOW, GRACE)] == ["s1"]


@pytest.mark.parametrize("module", [oracle, gate_a])
def test_the_judges_import_nothing_from_the_code_they_judge(module: Any) -> None:
    tree = ast.parse(Path(module.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "collections", "dataclasses", "datetime", "typing"}, imported
