"""The controller counts the active split shards from the webhook's admission record."""

from __future__ import annotations

import json

from controller.cache import Cache, Kind
from controller.metrics import ControllerMetrics
from controller.plan import make_plan
from tests.builders import NOW, NS, job_doc, sections

SHARD, OTHER, DONE = "shard-0001", "regular-0002", "shard-0003"


def record(*split_ids: str) -> dict[str, object]:
    marks = {i: "2026-11-29T11:59:00.000000Z dashboard-split-" for i in split_ids}
    return {
        "metadata": {"name": "elb-gate-admissions", "resourceVersion": "4"},
        "data": {"batch-work.json": "{}", "split-searches.json": json.dumps(marks)},
    }


def test_only_active_searches_the_record_marks_count_as_split_shards() -> None:
    cache = Cache([NS])
    jobs = [
        job_doc(f"submit-jobs-{SHARD}", app="submit", job_id=SHARD),
        job_doc(f"submit-jobs-{OTHER}", app="submit", job_id=OTHER),
    ]
    cache.replace(Kind.JOBS, NS, jobs)
    cache.replace(Kind.LEASES, NS, [])
    cache.replace(Kind.CONFIGMAPS, NS, [])
    cache.replace(Kind.ADMISSIONS, NS, [record(SHARD, DONE)])  # DONE: no Job listed
    plan = make_plan(cache.snapshot(NS), {}, None, NOW, *sections())
    assert (plan.census.count, plan.split_searches) == (2, 1)
    metrics = ControllerMetrics()
    metrics.set_namespace_state(
        NS,
        active_searches=plan.census.count,
        split_searches=plan.split_searches,
        ceiling=3,
        orphans=0,
        lease_expired=False,
        in_use=True,
        idle_seconds=0,
        computed_at=1.0,
    )
    assert f'elb_gate_active_split_searches{{namespace="{NS}"}} 1.0' in metrics.render().decode()
    # The record rewritten without marks (or deleted): no shard any more.
    cache.apply(Kind.ADMISSIONS, NS, "DELETED", record())
    assert make_plan(cache.snapshot(NS), {}, None, NOW, *sections()).split_searches == 0
