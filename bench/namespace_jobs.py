"""What a busy elastic-blast namespace holds, and how it is written to the API server.

A namespace that has run a few hundred searches holds thousands of Jobs, nearly all
of them finished. A search is 10 Jobs here, ElasticBLAST's own shapes
(:mod:`testbed.elastic_blast`): ``submit-jobs-<id8>`` (``app=submit``), eight
``blastn-batch-…-job-<n>-<id8>`` (``app=blast``) and ``elb-finalizer-<id8>``
(``app=finalizer``), all with the search's ``elb-job-id``. In the mix:

* 1 Job in 500 failed (``FailureTarget`` and ``Failed`` conditions, ``succeeded`` 0):
  terminal for the census, but the census LIST's ``status.successful=0`` field
  selector keeps it, so the webhook receives and parses it;
* searches 1 and 2 are still running: one blast Job and the finalizer each are
  unfinished (4 unfinished Jobs, 2 active searches, under the ceiling of 3);
* the finalizer of 1 search in 100 is still merging after its batch Jobs succeeded
  (*finishing*: unfinished, carrying the controller's ``batch-work-seen`` record; no
  slot);
* everything else succeeded (dropped by the field selector on the server).

That is the measured production mix: the dashboard's maintainers counted 76,571 Jobs of
which ``status.successful=0`` selected 206 (0.27 %); here 244 of 80,000 (0.31 %), 13 of
3,000.

Jobs are created in a fixed order, so the first N of ``planned_jobs(3000)`` are
exactly ``planned_jobs(N)``: a namespace grows from 30 to 300 to 3,000 Jobs by
adding the difference.

**How their status gets there.** Running 3,000 Jobs through the Job controller and
the kubelet stand-in would take many minutes and leave 3,000 Pods; instead each Job
carries ``spec.managedBy`` naming the benchmark (the Job controller then leaves it
alone, as it does for any external Job controller) and the benchmark writes the
status the Job controller would have written through ``/status`` — which the real
API server validates as it validates an external controller's (a ``Complete`` Job
needs ``SuccessCriteriaMet``, a ``Failed`` one ``FailureTarget``, a start time, no
active pods). The blast Jobs' ``ttlSecondsAfterFinished`` is dropped so the
namespace keeps its N Jobs for the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from elbgate.lease import format_microtime
from elbgate.names import BATCH_WORK_SEEN_ANNOTATION, HOLDER_USER_ANNOTATION, lease_name
from testbed import elastic_blast as elb

JOBS_PER_SEARCH = 10
BATCHES_PER_SEARCH = JOBS_PER_SEARCH - 2
RUNNING_SEARCHES = (1, 2)
FAILED_EVERY = 500
FINISHING_EVERY = 100
"""The finalizer of every 100th search is still merging (finishing)."""
MANAGED_BY = "bench.elb-gate.io/status-writer"
"""``spec.managedBy`` of the benchmark's Jobs: the Job controller skips them."""
DATABASE = "16S_ribosomal_RNA"

State = Literal["succeeded", "failed", "running", "finishing"]


@dataclass(frozen=True, slots=True)
class PlannedJob:
    """One Job of the mix: its search, its place in the search and its final state."""

    search: int
    slot: int
    """0: submit-jobs; 1..8: blast batch slot-1; 9: finalizer."""
    state: State

    @property
    def job_id(self) -> str:
        return elb.search_id(self.search)

    @property
    def app(self) -> str:
        if self.slot == 0:
            return "submit"
        if self.slot == JOBS_PER_SEARCH - 1:
            return "finalizer"
        return "blast"

    def body(self) -> dict[str, Any]:
        """The Job as testbed.elastic_blast shapes it (status and timestamps not set)."""
        if self.app == "submit":
            return elb.submit_jobs(self.job_id, num_nodes=BATCHES_PER_SEARCH)
        if self.app == "finalizer":
            return elb.finalizer(self.job_id)
        return elb.blast_batch(self.job_id, self.slot - 1, DATABASE)

    @property
    def name(self) -> str:
        return str(self.body()["metadata"]["name"])


def search_id(search: int) -> str:
    return elb.search_id(search)


def planned_jobs(total: int) -> list[PlannedJob]:
    """The first ``total`` Jobs of the mix (see the module docstring)."""
    jobs: list[PlannedJob] = []
    for index in range(total):
        search, slot = divmod(index, JOBS_PER_SEARCH)
        state: State = "succeeded"
        if search in RUNNING_SEARCHES and slot in (1, JOBS_PER_SEARCH - 1):
            state = "running"
        elif search % FINISHING_EVERY == FINISHING_EVERY - 1 and slot == JOBS_PER_SEARCH - 1:
            state = "finishing"
        elif index % FAILED_EVERY == FAILED_EVERY - 3:
            state = "failed"
        jobs.append(PlannedJob(search, slot, state))
    return jobs


def api_body(job: PlannedJob, namespace: str) -> dict[str, Any]:
    """What the benchmark POSTs: ElasticBLAST's body (:func:`testbed.elastic_blast.for_api`),
    managed by the benchmark, without a TTL."""
    body = elb.for_api(job.body(), namespace)
    body["spec"]["managedBy"] = MANAGED_BY
    body["spec"].pop("ttlSecondsAfterFinished", None)
    if job.state == "finishing":
        seen = f"{_seconds(datetime(2026, 1, 1))} blast/{job.name}"
        body["metadata"].setdefault("annotations", {})[BATCH_WORK_SEEN_ANNOTATION] = seen
    return body


def job_status(state: State, started: datetime, finished: datetime) -> dict[str, Any]:
    """The status the Job controller leaves in each state (as the API server accepts it
    from an external controller)."""
    start, end = _seconds(started), _seconds(finished)
    if state == "succeeded":
        return {
            "startTime": start,
            "completionTime": end,
            "succeeded": 1,
            "active": 0,
            "ready": 0,
            "terminating": 0,
            "conditions": [
                _condition("SuccessCriteriaMet", "CompletionsReached", end),
                _condition("Complete", "CompletionsReached", end),
            ],
        }
    if state == "failed":
        return {
            "startTime": start,
            "failed": 4,
            "active": 0,
            "ready": 0,
            "terminating": 0,
            "conditions": [
                _condition("FailureTarget", "BackoffLimitExceeded", end),
                _condition("Failed", "BackoffLimitExceeded", end),
            ],
        }
    return {"startTime": start, "active": 1, "ready": 1, "terminating": 0}  # running, finishing


def _condition(kind: str, reason: str, at: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": "Job has reached the specified backoff limit"
        if reason == "BackoffLimitExceeded"
        else "Reached expected number of succeeded pods",
        "lastProbeTime": at,
        "lastTransitionTime": at,
    }


def _seconds(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def submit_lease(namespace: str, holder_user: str, now: datetime) -> dict[str, Any]:
    """The Gate A Lease, held by ``holder_user``'s submit path and stamped as the
    mutating webhook stamps it (the benchmark writes it as admin: its namespace is not
    labelled gated, so no webhook sees the write)."""
    now_iso = format_microtime(now)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": lease_name(namespace),
            "namespace": namespace,
            "annotations": {HOLDER_USER_ANNOTATION: holder_user},
        },
        "spec": {
            "holderIdentity": "dashboard-2b0c9d58-3c1e-4f0e-9a51-6b1f1f5f2c11",
            "leaseDurationSeconds": 900,
            "acquireTime": now_iso,
            "renewTime": now_iso,
        },
    }
