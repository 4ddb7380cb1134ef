"""The demo's searches: ElasticBLAST's cloud-job-submission flow, with run times.

``elastic-blast submit`` (cloud job submission, AKS) creates two Jobs: the
``submit-jobs-<id8>`` Job (``app=submit``), whose pod creates the search's batch Jobs
(``app=blast``) in-cluster under the namespace's ``default`` service account, and then,
last, ``elb-finalizer-<id8>`` (``app=finalizer``), which waits for the batch work and
merges the results. The bodies and their order are :mod:`testbed.elastic_blast`'s; here
they get the ``localkube.elb-gate.io/run-seconds`` their pods run for on the control
plane.
"""

from __future__ import annotations

import random
from typing import Any

from testbed import elastic_blast as elb

BATCHES = 2
"""Batch Jobs per search (one per query batch)."""
NUM_CPUS = 4
"""elastic-blast's ``num-cpus``: each batch pod requests 2 CPUs (num-cpus - 2) and 4G."""
SUBMIT_POD_SECONDS = 6.0
"""How long the submit-jobs pod runs (it creates the batch Jobs in its first seconds)."""
BATCH_SECONDS = (20.0, 30.0)
"""Range of a batch Job's run time."""
FINALIZER_MARGIN_SECONDS = 4.0


def short(search_id: str) -> str:
    """The last 8 characters of an id: what elastic-blast puts in Job names."""
    return search_id[-8:]


def batch_seconds(job_id: str) -> list[float]:
    """How long each of the search's batch Jobs runs, drawn from its id: the demo's
    stand-in for the search's size, which the real submit Job and finalizer read from
    its metadata in storage."""
    rand = random.Random(job_id)
    return [round(rand.uniform(*BATCH_SECONDS)) for _ in range(BATCHES)]


def search_manifests(namespace: str, job_id: str, *, batch_work: bool) -> list[dict[str, Any]]:
    """The Jobs ``elastic-blast submit`` creates, in its order. The finalizer runs until
    its batch work is done (the real one polls for it), plus the merge. Without batch
    work only the finalizer, which never finishes on its own: it waits for batch
    results that will not come (an orphan)."""
    submit, finalizer = elb.flow("cloud-job-submission", job_id, nodes=BATCHES)
    if not batch_work:
        return [elb.for_api(finalizer, namespace)]
    seconds = SUBMIT_POD_SECONDS + max(batch_seconds(job_id)) + FINALIZER_MARGIN_SECONDS
    return [
        elb.for_api(submit, namespace, run_seconds=SUBMIT_POD_SECONDS),
        elb.for_api(finalizer, namespace, run_seconds=seconds),
    ]


def batch_jobs(job_id: str, namespace: str) -> list[dict[str, Any]]:
    """What the search's submit-jobs pod creates: one ``app=blast`` Job per batch."""
    return [
        elb.for_api(elb.blast_batch(job_id, n, num_cpus=NUM_CPUS), namespace, run_seconds=s)
        for n, s in enumerate(batch_seconds(job_id))
    ]
