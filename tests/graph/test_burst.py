"""Ten cold searches over two databases at once, on the real control plane, judged
independently: a database is never staged while another search has a live Job on
it, and the active searches never exceed the effective ceiling (issue 13, "Done
when").

The webhook runs with the capacity rule on (``ELB_GATE_CAPACITY=deny``, pool
``agentpool=blastpool``) and the DB staging rule at its default (``deny``); the
ceiling stays at its default, 3. Batch pods request 6 CPU (num-cpus 8), so the three
Standard_E16s_v5-shaped blast-pool nodes (15740m allocatable each) hold
floor(15740m / 6000m) = 2 searches: the effective ceiling is 2. The judge
(:mod:`tests.graph.burst_judge`) reads only the recorded Job events and the Nodes.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import elastic_blast as elb
from testbed.controlplane import BLAST_POOL, ControlPlane
from testbed.webhook_process import WebhookProcess
from tests.graph import burst_judge
from tests.graph.burst import Search, run_burst
from tests.graph.conftest import POOL_SELECTOR, webhook

DATABASES = ("core_nt", "swissprot")
SEARCHES = 10
CEILING = 3
"""BLAST_MAX_RUN_CONCURRENCY: the default."""
GRACE = 300.0
"""BLAST_FINALIZER_GRACE_SECONDS: the default."""
POOL = {"agentpool": BLAST_POOL["agentpool"]}


@pytest.fixture(scope="module")
def hook(control_plane: ControlPlane, ordinal_nodes: list[str]) -> Iterator[WebhookProcess]:
    env = {"ELB_GATE_CAPACITY": "deny", "ELB_GATE_CAPACITY_POOL_SELECTOR": POOL_SELECTOR}
    with webhook(control_plane, env) as process:
        yield process


def test_ten_cold_searches_over_two_databases_never_overlap_a_staging_nor_pass_the_ceiling(
    control_plane: ControlPlane, hook: WebhookProcess, scene_for, tmp_path: Path
) -> None:
    scene = scene_for(hook)
    scene.wait_for_pods_gone = True  # the batch pods hold real CPU requests
    searches = [Search(elb.search_id(i + 1), DATABASES[i % 2]) for i in range(SEARCHES)]
    users = ["alice", "bob", "carol", control_plane.plain_user(), control_plane.plain_user()]
    run = run_burst(control_plane, scene.namespace, searches, users, tmp_path, timeout=420)

    errors = [e for t in run.tasks for e in t.outcome.errors] + run.in_cluster.errors
    assert errors == []
    assert [t.search.job_id for t in run.tasks if t.outcome.admitted_at is None] == []
    verdict = burst_judge.judge(
        run.events,
        run.nodes,
        pool=POOL,
        max_run_concurrency=CEILING,
        finalizer_grace_seconds=GRACE,
    )
    refusals = Counter(r for t in run.tasks for r in t.outcome.refusals)
    in_cluster = Counter(run.in_cluster.refusals)
    print(
        f"\nburst: {SEARCHES} searches over {len(DATABASES)} databases in {run.wall_seconds:.1f} s; "
        f"peak {verdict.peak_active} active ({', '.join(verdict.peak_keys)}), effective ceiling "
        f"{verdict.effective_ceiling} (nodes hold {verdict.nodes_hold} at "
        f"{verdict.pod_cpu_millis}m per batch pod, BLAST_MAX_RUN_CONCURRENCY {CEILING}); "
        f"staging overlaps {len(verdict.overlaps)} (search-level, not judged: "
        f"{len(verdict.search_overlaps)}, {sum((o.end or run.finished) - o.start for o in verdict.search_overlaps):.1f} s); "
        f"{verdict.events} Job events; "
        f"first-Job refusals {dict(refusals)}; in-cluster batch refusals {dict(in_cluster)}"
    )
    assert verdict.overlaps == []
    assert verdict.over_ceiling == []
    # The judge's own reading of the nodes and the pods: min(3, floor(15740m / 6000m)).
    assert (verdict.pod_cpu_millis, verdict.nodes_hold, verdict.effective_ceiling) == (6000, 2, 2)
    # Every search staged its database; the ceiling was reached, and held by refusals.
    assert {db: len(ids) for db, ids in verdict.stagings.items()} == dict.fromkeys(DATABASES, 5)
    assert verdict.peak_active == verdict.effective_ceiling
    assert refusals["Capacity"] > 0
    # The webhook's own account of the ceiling agrees with the judge's.
    printed = [p for t in run.tasks for p in t.outcome.printed if "Capacity:" in p]
    for line in printed:
        assert line.startswith("Error from server (TooManyRequests): error when creating ")
        assert (
            "denied the request: Capacity: the ready nodes of the pool agentpool=blastpool hold 2 "
            "searches at 6 CPU / 3.8Gi per batch pod (ELB_GATE_CAPACITY_POD_CPU/_MEMORY): one pod "
            "per node on 3 ready nodes; tightest node aks-blastpool-"
        ) in line
        assert (
            "effective ceiling min(BLAST_MAX_RUN_CONCURRENCY 3, 2) = 2. 2/2 searches are active"
            in line
        )


# -- the judge itself -------------------------------------------------------------------------


def job(name: str, app: str, job_id: str, *, db: str = "", done: bool = False) -> dict:
    """A Job as the API shows it; ``db``: ELB_DB of a setup Job, the db label of a batch Job."""
    labels = {"app": app, "elb-job-id": job_id}
    env = []
    if db and app == "setup":
        env = [{"name": "ELB_DB", "value": db}]
    elif db:
        labels["db"] = db
    containers = [{"name": "c", "env": env, "resources": {"requests": {"cpu": "6"}}}]
    status = (
        {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        if done
        else {"active": 1}
    )
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"completions": 1, "template": {"spec": {"containers": containers}}},
        "status": status,
    }


def node(name: str, cpu: str = "15740m", ready: bool = True, pool: str = "blastpool") -> dict:
    return {
        "metadata": {"name": name, "labels": {"agentpool": pool}},
        "status": {
            "allocatable": {"cpu": cpu},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


NODES = [
    node("n0"),
    node("n1"),
    node("n2", "20"),
    node("sys", "3860m", pool="system"),
    node("down", "1", ready=False),
]


def events(*jobs: tuple[float, dict]) -> list[burst_judge.Event]:
    """Each Job's event at its time (the first of a name ADDED, later ones MODIFIED)."""
    seen: set[str] = set()
    out = []
    for at, j in jobs:
        out.append(
            burst_judge.Event(at, "MODIFIED" if j["metadata"]["name"] in seen else "ADDED", j)
        )
        seen.add(j["metadata"]["name"])
    return out


def verdict_of(history: list[burst_judge.Event], ceiling: int = 3) -> burst_judge.Verdict:
    return burst_judge.judge(
        history,
        NODES,
        pool={"agentpool": "blastpool"},
        max_run_concurrency=ceiling,
        finalizer_grace_seconds=GRACE,
    )


def test_the_judge_finds_a_search_reading_a_database_another_stages() -> None:
    history = events(
        (1, job("init-a", "setup", "a", db="core_nt")),
        (2, job("batch-b", "blast", "b", db="core_nt")),
        (3, job("init-a", "setup", "a", db="core_nt", done=True)),
    )
    (overlap,) = verdict_of(history).overlaps
    assert overlap == burst_judge.Overlap("core_nt", "a", "b", 2, 3)


def test_the_judge_finds_two_searches_staging_one_database_and_one_still_open() -> None:
    history = events(
        (1, job("init-a", "setup", "a", db="core_nt")),
        (2, job("init-b", "setup", "b", db="core_nt")),
    )
    found = {(o.stager, o.other, o.end) for o in verdict_of(history).overlaps}
    assert found == {("a", "b", None), ("b", "a", None)}


def test_the_judge_lets_other_databases_finished_jobs_and_own_jobs_be() -> None:
    history = events(
        (1, job("batch-b", "blast", "b", db="core_nt")),
        (2, job("batch-b", "blast", "b", db="core_nt", done=True)),
        (3, job("init-a", "setup", "a", db="core_nt")),
        (4, job("batch-a", "blast", "a", db="core_nt")),
        (5, job("init-c", "setup", "c", db="swissprot")),
        (6, job("fin-b", "finalizer", "b")),
    )
    verdict = verdict_of(history)
    assert verdict.overlaps == []
    assert verdict.stagings == {"core_nt": {"a"}, "swissprot": {"c"}}
    # b's finalizer reads no database: a search-level overlap, reported, not judged.
    assert verdict.search_overlaps == [burst_judge.Overlap("core_nt", "a", "b", 6, None)]


def test_the_judge_counts_active_searches_against_what_the_tightest_pool_node_holds() -> None:
    history = events(
        (1, job("batch-a", "blast", "a", db="x")),
        (2, job("batch-b", "blast", "b", db="y")),
        (3, job("batch-c", "blast", "c", db="z")),
    )
    verdict = verdict_of(history)
    # n0/n1: floor(15740m / 6000m) = 2; n2 (20 CPU) holds 3; the system and NotReady nodes do not count.
    assert (verdict.pod_cpu_millis, verdict.nodes_hold, verdict.effective_ceiling) == (6000, 2, 2)
    assert verdict.peak_active == 3 and verdict.over_ceiling == [(3, ("a", "b", "c"))]
    assert verdict_of(history[:2]).over_ceiling == []
    assert verdict_of(history[:2], ceiling=1).over_ceiling == [(2, ("a", "b"))]


@pytest.mark.parametrize(
    ("quantity", "millis"), [("15740m", 15740), ("6", 6000), ("0.5", 500), ("2.0005", 2001)]
)
def test_cpu_quantities(quantity: str, millis: int) -> None:
    assert burst_judge.cpu_millis(quantity) == millis


def test_the_judge_imports_nothing_from_the_code_it_judges() -> None:
    imported: set[str] = set()
    for node_ in ast.walk(ast.parse(Path(burst_judge.__file__).read_text())):
        if isinstance(node_, ast.Import):
            imported |= {alias.name for alias in node_.names}
        elif isinstance(node_, ast.ImportFrom):
            imported.add(node_.module or "")
    assert imported == {
        "__future__",
        "math",
        "collections.abc",
        "dataclasses",
        "datetime",
        "typing",
        "testbed.reliability",
    }
