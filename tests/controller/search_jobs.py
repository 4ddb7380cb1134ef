"""ElasticBLAST's search Jobs as the control plane runs them, and the submitter that
creates them.

The bodies are :mod:`testbed.elastic_blast`'s, shaped like the AKS templates of
elastic-blast-azure (labels, backoff limits, the batch Jobs' ``ttlSecondsAfterFinished``
and the finalizer's lack of one), made ready for the control plane: in a namespace,
with requests small enough that a whole test session's Jobs fit on the nodes, and the
kubelet stand-in's run time when a Job should finish (absent: its pod runs until
deleted, like a finalizer still merging results).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from client.submit_lease import SubmitLease
from elbgate.kube.config import KubeConfig
from elbgate.settings import GateSettings
from testbed import elastic_blast as elb
from testbed.api import Api, JsonObj
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until

BATCH_TTL_SECONDS = 1800
"""``ttlSecondsAfterFinished`` of ElasticBLAST's batch Jobs."""


def search_id() -> str:
    """An ElasticBLAST ``elb-job-id``: ``job-`` and 32 hex digits."""
    return f"job-{uuid.uuid4().hex}"


def _ready(body: JsonObj, namespace: str, run_seconds: float | None) -> JsonObj:
    return elb.for_api(body, namespace, run_seconds=run_seconds, requests=elb.SMALL_REQUESTS)


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
    return _ready(elb.blast_batch(job_id, n, db, ttl=ttl), namespace, run_seconds)


def submit_jobs(namespace: str, job_id: str, *, run_seconds: float | None = None) -> JsonObj:
    """Cloud job submission's ``submit-jobs`` Job (``app=submit``, backoffLimit 0)."""
    return _ready(elb.submit_jobs(job_id, num_nodes=3), namespace, run_seconds)


def finalizer(namespace: str, job_id: str, *, run_seconds: float | None = None) -> JsonObj:
    """The search's last Job (``app=finalizer``; no TTL, backoffLimit 0)."""
    return _ready(elb.finalizer(job_id), namespace, run_seconds)


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
