"""ElasticBLAST's search Jobs as the control plane runs them, and the submitter that
creates them.

Shaped like the AKS templates of elastic-blast-azure (``blast-batch-job-*-aks``,
``job-submit-jobs-aks``, ``elb-finalizer-aks``): the ``app``/``elb-job-id``/``db`` labels
on the Job and its pod template, ``backoffLimit``, ``restartPolicy``, the batch Jobs'
``ttlSecondsAfterFinished`` (1800 in the templates) and the finalizer's lack of one. Two
things differ on purpose: requests are tiny (10m CPU) so a whole test session's Jobs fit
on the nodes, and the pod template carries the kubelet stand-in's
``localkube.elb-gate.io/run-seconds`` when a Job should finish (absent: its pod runs
until deleted, like a finalizer still merging results).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from client.submit_lease import SubmitLease
from elbgate.kube.config import KubeConfig
from elbgate.settings import GateSettings
from testbed.api import Api, JsonObj
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until

IMAGE = "elbacr.azurecr.io/ncbi/elb:1.4.0"
SUBMIT_IMAGE = "elbacr.azurecr.io/ncbi/elasticblast-job-submit:4.1.0"
RESULTS = "https://elbstorage.blob.core.windows.net/results"
RUN_SECONDS = "localkube.elb-gate.io/run-seconds"
BATCH_TTL_SECONDS = 1800
"""``ttlSecondsAfterFinished`` of ElasticBLAST's batch Jobs."""


def search_id() -> str:
    """An ElasticBLAST ``elb-job-id``: ``job-`` and 32 hex digits."""
    return f"job-{uuid.uuid4().hex}"


def _env(**values: str) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _job(
    namespace: str,
    name: str,
    labels: dict[str, str],
    container: dict[str, Any],
    *,
    backoff_limit: int,
    restart_policy: str = "Never",
    ttl: int | None = None,
    run_seconds: float | None = None,
) -> JsonObj:
    annotations = {RUN_SECONDS: str(run_seconds)} if run_seconds is not None else {}
    container = {
        **container,
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
    }
    spec: JsonObj = {
        "backoffLimit": backoff_limit,
        "template": {
            "metadata": {"labels": dict(labels), "annotations": annotations},
            "spec": {"containers": [container], "restartPolicy": restart_policy},
        },
    }
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def blast_batch(
    namespace: str,
    job_id: str,
    n: int,
    *,
    db: str = "16S_ribosomal_RNA",
    ttl: int = BATCH_TTL_SECONDS,
    run_seconds: float | None = None,
) -> JsonObj:
    """Batch ``n`` of a search (``app=blast``; restartPolicy OnFailure, backoffLimit 3)."""
    labels = {"app": "blast", "db": db, "elb-job-id": job_id}
    container = {
        "name": "blast",
        "image": IMAGE,
        "env": _env(
            BLAST_ELB_JOB_ID=job_id,
            BLAST_ELB_BATCH_NUM=str(n),
            ELB_BLAST_PROGRAM="blastn",
            ELB_DB=db,
        ),
        "command": ["/scripts/blast-run-aks.sh"],
    }
    name = f"blastn-batch-{db.replace('_', '-').lower()}-job-{n}-{job_id[-8:]}"
    return _job(
        namespace,
        name,
        labels,
        container,
        backoff_limit=3,
        restart_policy="OnFailure",
        ttl=ttl,
        run_seconds=run_seconds,
    )


def submit_jobs(namespace: str, job_id: str, *, run_seconds: float | None = None) -> JsonObj:
    """Cloud job submission's ``submit-jobs`` Job (``app=submit``, backoffLimit 0)."""
    labels = {"app": "submit", "elb-job-id": job_id}
    container = {
        "name": "submit-jobs",
        "image": SUBMIT_IMAGE,
        "env": _env(ELB_RESULTS=f"{RESULTS}/{job_id}", ELB_NUM_NODES="3"),
    }
    return _job(
        namespace,
        f"submit-jobs-{job_id[-8:]}",
        labels,
        container,
        backoff_limit=0,
        run_seconds=run_seconds,
    )


def finalizer(namespace: str, job_id: str, *, run_seconds: float | None = None) -> JsonObj:
    """The search's last Job (``app=finalizer``; no TTL, backoffLimit 0)."""
    labels = {"app": "finalizer", "elb-job-id": job_id}
    container = {
        "name": "finalizer",
        "image": IMAGE,
        "env": _env(ELB_RESULTS=f"{RESULTS}/{job_id}", BLAST_ELB_JOB_ID=job_id),
        "command": ["/scripts/elb-finalizer-aks.sh"],
    }
    return _job(
        namespace,
        f"elb-finalizer-{job_id[-8:]}",
        labels,
        container,
        backoff_limit=0,
        run_seconds=run_seconds,
    )


class Submitter:
    """A plain user running ``elastic-blast submit`` the gated way: it holds the submit
    Lease (through the webhook) while it creates a search's Jobs."""

    def __init__(self, cp: ControlPlane, user: str, namespace: str) -> None:
        self.cp = cp
        self.user = user
        self.namespace = namespace
        self.api: Api = cp.api(user)

    def acquire(self, ttl_seconds: int | None = None) -> SubmitLease:
        """The submit Lease, acquired (waiting while busy); the caller closes it."""
        gate = GateSettings()
        if ttl_seconds is not None:
            gate = GateSettings(lease_ttl_seconds=ttl_seconds)
        lease = SubmitLease(
            self.namespace,
            gate=gate,
            source="cli",
            config=KubeConfig.load(self.cp.kubeconfig(self.user)),
        )
        try:
            wait_until(lambda: lease.acquire().acquired, 60, f"{self.user} holds the Lease")
        except BaseException:
            lease.close()
            raise
        return lease

    @contextmanager
    def holding(self, ttl_seconds: int | None = None) -> Iterator[SubmitLease]:
        """The submit Lease, acquired (waiting while busy) and released on exit."""
        lease = self.acquire(ttl_seconds)
        try:
            yield lease
            lease.release()
        finally:
            lease.close()

    def create(self, *jobs: JsonObj) -> list[JsonObj]:
        """Create ``jobs`` in order as this user (each through admission)."""
        return [self.api.create(job) for job in jobs]


def job_names(jobs: list[JsonObj]) -> list[str]:
    return [j["metadata"]["name"] for j in jobs]
