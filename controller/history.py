"""The namespace's history, read only where a decision needs it.

A namespace keeps tens of thousands of succeeded Jobs (finalizer, submit and setup Jobs
carry no TTL); the controller watches only the live ones (``status.successful=0``). What
the history still answers is whether a live finalizer's search had batch work that
finished out of the watch's sight — before the controller started, or while it relisted —
and was not TTL-deleted since. Searches admitted since the install have that evidence in
the webhook's admission record, and every finalizer the controller has seen next to its
batch work carries it (``elb-gate.io/batch-work-seen``); only a search admitted before the
install, whose finalizer has neither, is looked up: one metadata-only LIST of its
batch-work Jobs (``elb-job-id=<id>``, ``limit=1``), once per relist of the Jobs watch.
"""

from __future__ import annotations

import asyncio

from elbgate.kube.api import JOBS, METADATA_LIST, KubeApi, path
from elbgate.names import BATCH_WORK_EVIDENCE_APPS, JOB_ID_LABEL

LOOKUPS_IN_FLIGHT = 4


def batch_work_selector(job_id: str) -> str:
    """The label selector of ``job_id``'s batch-work Jobs."""
    apps = ",".join(sorted(BATCH_WORK_EVIDENCE_APPS))
    return f"{JOB_ID_LABEL}={job_id},app in ({apps})"


async def look_up(api: KubeApi, namespace: str, job_id: str, deadline: float) -> str:
    """``<app>/<name>`` of one batch-work Job of ``job_id`` in ``namespace`` (finished or
    not), or ``""`` when there is none. Reads one object's metadata at most; raises
    :class:`~elbgate.kube.api.ApiError` / :class:`~elbgate.kube.api.ApiUnavailable`."""
    body = await api.request(
        "GET",
        path(JOBS, namespace),
        query={"limit": "1", "labelSelector": batch_work_selector(job_id)},
        accept=METADATA_LIST,
        deadline=deadline,
    )
    for item in body.get("items") or []:
        meta = item.get("metadata") or {}
        labels = meta.get("labels") or {}
        name, app = meta.get("name"), labels.get("app")
        if name and app in BATCH_WORK_EVIDENCE_APPS and labels.get(JOB_ID_LABEL) == job_id:
            return f"{app}/{name}"
    return ""


async def look_up_all(
    api: KubeApi, namespace: str, job_ids: list[str], deadline: float
) -> dict[str, str]:
    """:func:`look_up` of each of ``job_ids``, a few at a time; raises on the first
    failure (nothing is judged on a partial answer)."""
    gate = asyncio.Semaphore(LOOKUPS_IN_FLIGHT)

    async def one(job_id: str) -> tuple[str, str]:
        async with gate:
            return job_id, await look_up(api, namespace, job_id, deadline)

    return dict(await asyncio.gather(*(one(j) for j in job_ids)))
