"""The Jobs of one search, shaped like the ones ``elastic-blast submit`` creates.

Order (DESIGN.md, Gate B): the ``app=submit`` Job, the ``app=blast`` batch Jobs,
then, last, the ``app=finalizer`` Job named ``elb-finalizer-<last 8 of id>``.
All carry ``elb-job-id``, ``backoffLimit: 0`` and ``restartPolicy: Never``.
"""

from __future__ import annotations

import uuid
from typing import Any

from elbgate.names import APP_LABEL, BLAST_APP, FINALIZER_APP, JOB_ID_LABEL, SUBMIT_APP

IMAGE = "ncbi/elb:1.3.0"


def new_search_id() -> str:
    """An ``elb-job-id`` as elastic-blast makes one: a uuid4, hex."""
    return uuid.uuid4().hex


def short(search_id: str) -> str:
    """The last 8 characters of an id: what elastic-blast puts in Job names."""
    return search_id[-8:]


def job(
    app: str, name: str, namespace: str, search_id: str, *, fail: bool = False
) -> dict[str, Any]:
    """One batch/v1 Job of search ``search_id``."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {APP_LABEL: app, JOB_ID_LABEL: search_id},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {APP_LABEL: app, JOB_ID_LABEL: search_id}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": app, "image": IMAGE, "command": ["true"]}],
                },
            },
        },
    }


def search_jobs(
    namespace: str, search_id: str, blasts: int = 2, *, batch_work: bool = True
) -> list[dict[str, Any]]:
    """A search's Jobs in creation order. Without ``batch_work`` only the finalizer
    is made: a search whose batch work never appears (its finalizer becomes an orphan)."""
    tail = short(search_id)
    jobs = []
    if batch_work:
        jobs.append(job(SUBMIT_APP, f"elb-submit-{tail}", namespace, search_id))
        jobs += [
            job(BLAST_APP, f"blastn-batch-pdbnt-job-{n}-{tail}", namespace, search_id)
            for n in range(1, blasts + 1)
        ]
    jobs.append(job(FINALIZER_APP, f"elb-finalizer-{tail}", namespace, search_id))
    return jobs
