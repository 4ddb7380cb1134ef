"""The demo's searches: ElasticBLAST's cloud-job-submission flow, with run times.

``elastic-blast submit`` (cloud job submission, AKS) creates two Jobs: the
``submit-jobs-<id8>`` Job (``app=submit``), whose pod creates the search's batch Jobs
(``app=blast``) in-cluster under the namespace's ``default`` service account, and then,
last, ``elb-finalizer-<id8>`` (``app=finalizer``), which waits for the batch work and
merges the results. The bodies are :mod:`testbed.elastic_blast`'s; here they get the
``localkube.elb-gate.io/run-seconds`` their pods run for on the control plane.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

from testbed import elastic_blast as elb

DATABASE = "16S_ribosomal_RNA"
BATCHES = 2
"""Batch Jobs per search (one per query batch)."""
NUM_CPUS = 4
"""elastic-blast's ``num-cpus``: each batch pod requests 2 CPUs (num-cpus - 2) and 4G."""
SUBMIT_POD_SECONDS = 6.0
"""How long the submit-jobs pod runs (it creates the batch Jobs in its first seconds)."""
BATCH_SECONDS = (20.0, 30.0)
"""Range of a batch Job's run time."""
FINALIZER_MARGIN_SECONDS = 4.0
BATCH_SECONDS_ANNOTATION = "demo.elb-gate.io/batch-seconds"
"""On the submit Job: how long each batch Job it creates runs (the demo's stand-in for the
search's size, which the real submit Job reads from its metadata in storage)."""


def new_search_id() -> str:
    """An ``elb-job-id`` as elastic-blast makes one: a uuid4, hex."""
    return uuid.uuid4().hex


def short(search_id: str) -> str:
    """The last 8 characters of an id: what elastic-blast puts in Job names."""
    return search_id[-8:]


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """One search's Jobs and how long each runs."""

    job_id: str
    batch_seconds: tuple[float, ...]

    @classmethod
    def for_id(cls, job_id: str) -> SearchPlan:
        rand = random.Random(job_id)
        return cls(job_id, tuple(round(rand.uniform(*BATCH_SECONDS)) for _ in range(BATCHES)))

    @property
    def finalizer_seconds(self) -> float:
        """Until its batch work is done (the real one polls for it), plus the merge."""
        return SUBMIT_POD_SECONDS + max(self.batch_seconds) + FINALIZER_MARGIN_SECONDS


def submit_job(plan: SearchPlan, namespace: str) -> dict[str, Any]:
    """The ``submit-jobs-<id8>`` Job: the search's first Job."""
    return elb.for_api(
        elb.submit_jobs(plan.job_id, num_nodes=BATCHES),
        namespace,
        run_seconds=SUBMIT_POD_SECONDS,
        annotations={BATCH_SECONDS_ANNOTATION: ",".join(f"{s:g}" for s in plan.batch_seconds)},
    )


def finalizer_job(plan: SearchPlan, namespace: str, *, batch_work: bool = True) -> dict[str, Any]:
    """``elb-finalizer-<id8>``. Without batch work it never finishes on its own: it waits
    for batch results that will not come (an orphan)."""
    seconds = plan.finalizer_seconds if batch_work else None
    return elb.for_api(elb.finalizer(plan.job_id), namespace, run_seconds=seconds)


def batch_jobs(submit: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """What the submit Job's pod creates: one ``app=blast`` Job per batch."""
    labels = submit["metadata"].get("labels") or {}
    job_id = str(labels.get("elb-job-id") or "")
    annotations = submit["metadata"].get("annotations") or {}
    seconds = [float(s) for s in str(annotations.get(BATCH_SECONDS_ANNOTATION, "")).split(",") if s]
    if not seconds:
        seconds = list(SearchPlan.for_id(job_id).batch_seconds)
    return [
        elb.for_api(
            elb.blast_batch(job_id, n, DATABASE, num_cpus=NUM_CPUS), namespace, run_seconds=s
        )
        for n, s in enumerate(seconds)
    ]
