"""Small builders for the controller's table tests: Leases, Jobs and cache snapshots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from controller.cache import ConfigMapRecord, Snapshot
from controller.liveness import format_time
from elbgate.census import JobRef, is_terminal
from elbgate.lease import LeaseView, format_microtime
from elbgate.names import (
    HOLDER_POD_ANNOTATION,
    HOLDER_USER_ANNOTATION,
    ORPHANED_SINCE_ANNOTATION,
    lease_name,
)
from elbgate.settings import Settings

NS = "blast"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
HOLDER = "dashboard-0b9f6c1e2d3a4b5c8d7e6f5a4b3c2d1e"
POD_UID = "11111111-2222-3333-4444-555555555555"
STAMP = f"{NS}/celery-worker-0/{POD_UID}"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def settings(**overrides: Any) -> Settings:
    """Defaults as shipped, with ``overrides`` (field names)."""
    return Settings(**overrides)


def lease_doc(
    holder: str = HOLDER,
    renewed_ago: float | None = 10,
    renew_time: str | None = None,
    duration: int | None = 900,
    pod: str | None = None,
    user: str | None = "dashboard",
    rv: str = "41",
    namespace: str = NS,
) -> dict[str, Any]:
    """A submit Lease as the API returns it."""
    spec: dict[str, Any] = {}
    if holder:
        spec["holderIdentity"] = holder
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    if renew_time is not None:
        spec["renewTime"] = renew_time
    elif renewed_ago is not None:
        spec["renewTime"] = format_microtime(ago(renewed_ago))
        spec["acquireTime"] = spec["renewTime"]
    annotations = {}
    if user:
        annotations[HOLDER_USER_ANNOTATION] = user
    if pod:
        annotations[HOLDER_POD_ANNOTATION] = pod
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": lease_name(namespace),
            "namespace": namespace,
            "resourceVersion": rv,
            "annotations": annotations,
        },
        "spec": spec,
    }


def lease(**kw: Any) -> LeaseView:
    return LeaseView.from_dict(lease_doc(**kw))


def job_doc(
    name: str,
    app: str = "finalizer",
    job_id: str | None = "s1",
    age: float | None = 600,
    finished: bool = False,
    orphaned_since: str | datetime | None = None,
    rv: str = "7",
    namespace: str = NS,
) -> dict[str, Any]:
    """A batch/v1 Job as the API returns it (only the fields anyone reads)."""
    labels = {"app": app}
    if job_id:
        labels["elb-job-id"] = job_id
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "labels": labels,
    }
    if age is not None:
        meta["creationTimestamp"] = format_time(ago(age))
    if orphaned_since is not None:
        since = (
            format_microtime(orphaned_since)
            if isinstance(orphaned_since, datetime)
            else orphaned_since
        )
        meta["annotations"] = {ORPHANED_SINCE_ANNOTATION: since}
    status: dict[str, Any] = {"active": 1}
    if finished:
        status = {"succeeded": 1, "completionTime": format_time(NOW)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "status": status}


def snapshot(
    lease: LeaseView | None = None,
    jobs: Iterable[Mapping[str, Any]] = (),
    liveness: Mapping[str, str] | None = None,
    liveness_rv: str = "90",
    namespace: str = NS,
) -> Snapshot:
    """What the cache would hold after seeing ``jobs`` (finished ones kept only if marked;
    of finished batch Jobs only their search ids)."""
    unfinished: list[JobRef] = []
    finished_marked: list[JobRef] = []
    batch_work: set[str] = set()
    for doc in jobs:
        ref = JobRef.from_dict(doc)
        if not is_terminal(doc):
            unfinished.append(ref)
            continue
        if ref.orphaned_since:
            finished_marked.append(ref)
        if ref.app in ("submit", "blast") and ref.job_id:
            batch_work.add(ref.job_id)
    record = None
    if liveness is not None:
        record = ConfigMapRecord("elb-blast-liveness", liveness_rv, dict(liveness))
    return Snapshot(
        namespace, lease, tuple(unfinished), tuple(finished_marked), record, frozenset(batch_work)
    )
