"""Durable evidence of batch work: record on a finalizer that its search had batch work.

The first time the controller sees a batch-work Job (``app`` in
:data:`~elbgate.names.BATCH_WORK_EVIDENCE_APPS`) for a non-terminal finalizer's
``elb-job-id``, it writes ``elb-gate.io/batch-work-seen`` on the finalizer (CAS). From then
on the census calls that finalizer *finishing* — never an orphan — whatever happens to the
batch Jobs (TTL-deleted 1800 s after they finish) or to the controller (restarted, replaced
by another leader): the evidence lives on the object, not in memory. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from controller.actions import RecordBatchWork
from elbgate.census import JobRef
from elbgate.lease import format_microtime
from elbgate.names import FINALIZER_APP


def record_value(since: datetime, seen: str) -> str:
    """The annotation's value: ``<RFC 3339 time> <app>/<Job name>``."""
    return f"{format_microtime(since)} {seen}"


def plan_batch_work_records(
    unfinished: Iterable[JobRef], batch_work: Mapping[str, str], now: datetime
) -> list[RecordBatchWork]:
    """A record for every non-terminal finalizer that lacks one while a batch-work Job of
    its search is in view (``batch_work``: ``elb-job-id`` → ``<app>/<name>``)."""
    return [
        RecordBatchWork(job=ref, since=now, seen=batch_work[ref.job_id])
        for ref in sorted(unfinished, key=lambda r: r.name)
        if ref.app == FINALIZER_APP
        and ref.job_id
        and not ref.batch_work_seen
        and ref.job_id in batch_work
    ]
