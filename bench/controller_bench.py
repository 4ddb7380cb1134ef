"""Controller benchmarks at 1,000 watched Jobs: cache memory, CPU per watch event, CPU of a
full resync (plan), and API writes in steady state.

``run() -> dict`` is called by the bench harness (``python -m bench``); this module can
also be run alone: ``python -m bench.controller_bench``. Numbers are measured, never
asserted here (the machine may be shared and noisy).

* memory: tracemalloc of what the cache retains after 1,000 Jobs were decoded from watch
  lines and fed through the watch path (the decoded objects themselves are dropped);
* event CPU: ``time.process_time`` over N MODIFIED events fed through
  :meth:`Informer.handle_event` (the exact watch code path, cache + dirty-marking),
  objects pre-decoded (JSON decoding is reported separately, it is the API layer's);
* resync CPU: :func:`make_plan` of a namespace holding 1,000 unfinished Jobs;
* steady-state writes: actions planned once the liveness ConfigMap is current (must be 0).
"""

from __future__ import annotations

import gc
import json
import random
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import orjson

from controller.actions import WriteLiveness
from controller.cache import Cache, ConfigMapRecord, Kind, Snapshot
from controller.metrics import ControllerMetrics
from controller.plan import make_plan
from elbgate.kube.api import KubeApi
from elbgate.kube.informer import Informer, WatchSpec
from elbgate.lease import format_microtime
from elbgate.settings import Settings

NS = "blast"
JOBS_N = 1_000
EVENTS_N = 20_000
RESYNC_RUNS = 20
TARGETS = {
    "cache_mb_per_1000_jobs": 3.0,
    "event_cpu_us": 25.0,
    "resync_cpu_ms": 100.0,
    "steady_state_writes": 0,
}


def _job(i: int, now: datetime, rv: int) -> dict[str, Any]:
    """A realistic Job as the API sends it (spec, template and status included)."""
    search = f"elb-{i // 4:05d}-{'a1b2c3d4'}"
    app = "finalizer" if i % 4 == 0 else "blast"
    name = f"{app}-{search}-{i:05d}"
    uid = f"{i:08x}-1111-2222-3333-444455556666"
    annotations = {"batch.kubernetes.io/job-tracking": ""}
    if app == "finalizer":
        # Steady state: the controller recorded its search's batch work at first sight
        # (one write per finalizer in its life), so no reconcile writes it again.
        annotations["elb-gate.io/batch-work-seen"] = f"{format_microtime(now)} blast/x"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "resourceVersion": str(rv),
            "generation": 1,
            "creationTimestamp": format_microtime(now - timedelta(seconds=60 + i)),
            "labels": {"app": app, "elb-job-id": search, "batch.kubernetes.io/job-name": name},
            "annotations": annotations,
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 6,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "template": {
                "metadata": {"labels": {"app": app, "elb-job-id": search}},
                "spec": {
                    "containers": [
                        {
                            "name": app,
                            "image": "ncbi/elb:1.3.0",
                            "command": ["/bin/bash", "-c", "run-blast.sh --db nt --batch 17"],
                            "env": [{"name": "ELB_RESULTS", "value": "gs://bucket/results"}],
                            "resources": {"requests": {"cpu": "15", "memory": "60Gi"}},
                            "volumeMounts": [{"name": "blastdb", "mountPath": "/blast/blastdb"}],
                        }
                    ],
                    "restartPolicy": "Never",
                    "volumes": [{"name": "blastdb", "persistentVolumeClaim": {"claimName": "db"}}],
                },
            },
        },
        "status": {"active": 1, "startTime": format_microtime(now), "ready": 1},
    }


def _synced_cache(on_change: Any = None) -> Cache:
    cache = Cache([NS], on_change=on_change)
    for kind in (Kind.JOBS, Kind.LEASES, Kind.CONFIGMAPS):
        cache.replace(kind, NS, [])
    return cache


def measure_cache_memory(now: datetime) -> float:
    """MB the cache retains for JOBS_N Jobs fed as decoded watch lines."""
    lines = [orjson.dumps({"type": "ADDED", "object": _job(i, now, i + 1)}) for i in range(JOBS_N)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        cache = _synced_cache()
        informer = Informer(
            cast(KubeApi, None), cache, WatchSpec(Kind.JOBS, NS, ""), ControllerMetrics()
        )
        for line in lines:
            informer.handle_event(orjson.loads(line))  # decoded object dropped after this
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert cache.job_count() == JOBS_N
    retained = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return retained / 1e6


def measure_event_cpu(now: datetime, events_n: int = EVENTS_N) -> tuple[float, float]:
    """(µs per event through the watch path, µs per JSON decode of one event line)."""
    dirty: set[str] = set()
    cache = _synced_cache(dirty.add)
    informer = Informer(
        cast(KubeApi, None), cache, WatchSpec(Kind.JOBS, NS, ""), ControllerMetrics()
    )
    for i in range(JOBS_N):
        informer.handle_event({"type": "ADDED", "object": _job(i, now, i + 1)})
    rng = random.Random(7)
    events = [
        {"type": "MODIFIED", "object": _job(rng.randrange(JOBS_N), now, JOBS_N + n + 1)}
        for n in range(events_n)
    ]
    started = time.process_time()
    for event in events:
        informer.handle_event(event)
    per_event = (time.process_time() - started) / events_n * 1e6
    lines = [orjson.dumps(e) for e in events[:2_000]]
    started = time.process_time()
    for line in lines:
        orjson.loads(line)
    per_decode = (time.process_time() - started) / len(lines) * 1e6
    return per_event, per_decode


def measure_resync(now: datetime, settings: Settings) -> tuple[float, int, int]:
    """(ms CPU of one plan at JOBS_N Jobs, writes of the first plan, writes once steady)."""
    cache = _synced_cache()
    for i in range(JOBS_N):
        cache.apply(Kind.JOBS, NS, "ADDED", _job(i, now, i + 1))
    snap = cache.snapshot(NS)
    first = make_plan(snap, {}, None, now, settings.gate, settings.controller)
    (write,) = [a for a in first.actions if isinstance(a, WriteLiveness)]
    steady = Snapshot(
        NS,
        snap.lease,
        snap.unfinished,
        snap.finished_marked,
        ConfigMapRecord("elb-blast-liveness", "5", dict(write.data)),
    )
    later = now + timedelta(seconds=1)
    started = time.process_time()
    for _ in range(RESYNC_RUNS):
        plan = make_plan(steady, {}, now, later, settings.gate, settings.controller)
    per_plan = (time.process_time() - started) / RESYNC_RUNS * 1e3
    assert plan.census.count == JOBS_N // 4
    return per_plan, len(first.actions), len(plan.actions)


def run(events: int = EVENTS_N) -> dict[str, Any]:
    """Measure everything; numbers per 1,000 watched Jobs (``events``: how many watch
    events the per-event CPU is averaged over)."""
    now = datetime.now(UTC)
    settings = Settings.of(namespaces=(NS,))
    memory_mb = measure_cache_memory(now)
    event_us, decode_us = measure_event_cpu(now, events)
    resync_ms, first_writes, steady_writes = measure_resync(now, settings)
    return {
        "jobs": JOBS_N,
        "cache_mb_per_1000_jobs": round(memory_mb, 3),
        "event_cpu_us": round(event_us, 2),
        "event_decode_us": round(decode_us, 2),
        "events_measured": events,
        "resync_cpu_ms": round(resync_ms, 2),
        "first_reconcile_writes": first_writes,
        "steady_state_writes": steady_writes,
        "targets": TARGETS,
        "within_targets": {
            "cache_mb_per_1000_jobs": memory_mb <= TARGETS["cache_mb_per_1000_jobs"],
            "event_cpu_us": event_us <= TARGETS["event_cpu_us"],
            "resync_cpu_ms": resync_ms <= TARGETS["resync_cpu_ms"],
            "steady_state_writes": steady_writes == 0,
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
