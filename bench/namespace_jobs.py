"""What a busy elastic-blast namespace holds, and how to put it into the emulator.

elastic-blast never deletes finished Jobs, so a namespace that has run a few
hundred searches holds thousands of Jobs, nearly all of them completed. A
search is 10 Jobs here (one ``app=submit``, eight ``app=blast``, one
``app=finalizer``, all with its ``elb-job-id``). In the mix:

* 1 Job in 20 failed (``Failed`` condition, ``succeeded`` 0): terminal for the
  census, but the census LIST's ``status.successful=0`` field selector keeps
  it, so the webhook receives and parses it;
* searches 1 and 2 are still running: one blast Job and the finalizer each are
  unfinished (4 unfinished Jobs, 2 active searches, under the ceiling of 3);
* everything else succeeded (dropped by the field selector on the server).

Jobs are created in a fixed order, so the first N of ``planned_jobs(3000)``
are exactly ``planned_jobs(N)``: a namespace grows from 30 to 300 to 3,000 Jobs
by adding the difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from elbgate.lease import format_microtime
from elbgate.names import HOLDER_USER_ANNOTATION, lease_name

JOBS_PER_SEARCH = 10
RUNNING_SEARCHES = (1, 2)
FAILED_EVERY = 20

State = Literal["succeeded", "failed", "running"]


@dataclass(frozen=True, slots=True)
class PlannedJob:
    """One Job of the mix: its name, labels and final state."""

    name: str
    app: str
    job_id: str
    state: State


def search_id(search: int) -> str:
    return f"bench{search:05d}"


def planned_jobs(total: int) -> list[PlannedJob]:
    """The first ``total`` Jobs of the mix (see the module docstring)."""
    jobs: list[PlannedJob] = []
    for index in range(total):
        search, slot = divmod(index, JOBS_PER_SEARCH)
        jid = search_id(search)
        if slot == 0:
            app, name = "submit", f"elb-submit-{jid}"
        elif slot == JOBS_PER_SEARCH - 1:
            app, name = "finalizer", f"elb-finalizer-{jid}"
        else:
            app, name = "blast", f"elb-batch-{jid}-{slot - 1:03d}"
        state: State = "succeeded"
        if search in RUNNING_SEARCHES and slot in (1, JOBS_PER_SEARCH - 1):
            state = "running"
        elif index % FAILED_EVERY == FAILED_EVERY - 3:
            state = "failed"
        jobs.append(PlannedJob(name, app, jid, state))
    return jobs


def job_body(namespace: str, name: str, app: str, job_id: str) -> dict[str, Any]:
    """A Job shaped like elastic-blast's (pod template, env, resources, volumes), so
    LIST bodies are as large as a real namespace's (~2.5 KB per Job)."""
    labels = {"app": app, "elb-job-id": job_id, "owner": "elb-dashboard", "elb-db": "nt"}
    env = [
        {"name": "ELB_RESULTS", "value": f"https://elbresults.blob.core.windows.net/{job_id}"},
        {"name": "ELB_DB", "value": "nt"},
        {"name": "ELB_PROGRAM", "value": "blastn"},
        {"name": "ELB_NUM_CPUS", "value": "16"},
        {"name": "ELB_BLAST_OPTIONS", "value": "-outfmt 11 -max_target_seqs 500 -evalue 1e-5"},
        {"name": "ELB_JOB_ID", "value": job_id},
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"elb-gate.bench/purpose": "a realistic Job body"},
        },
        "spec": {
            "backoffLimit": 3,
            "activeDeadlineSeconds": 86400,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"agentpool": "blastpool"},
                    "volumes": [
                        {"name": "blastdb", "persistentVolumeClaim": {"claimName": "blast-dbs"}},
                        {"name": "shared", "emptyDir": {}},
                    ],
                    "containers": [
                        {
                            "name": app,
                            "image": "ncbi/elb:1.3.1",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["/bin/bash", "-co"],
                            "args": [
                                "set -euo pipefail; blastn -db nt -query /shared/query.fa "
                                "-out /shared/results.out -num_threads 16 $ELB_BLAST_OPTIONS; "
                                "azcopy cp /shared/results.out $ELB_RESULTS/ --recursive"
                            ],
                            "env": env,
                            "resources": {
                                "requests": {"cpu": "15", "memory": "60Gi"},
                                "limits": {"cpu": "16", "memory": "64Gi"},
                            },
                            "volumeMounts": [
                                {
                                    "name": "blastdb",
                                    "mountPath": "/blast/blastdb",
                                    "readOnly": True,
                                },
                                {"name": "shared", "mountPath": "/shared"},
                            ],
                        }
                    ],
                },
            },
        },
    }


def job_status(state: State, started: str) -> dict[str, Any]:
    """The status the Job controller leaves in each state."""
    if state == "succeeded":
        return {
            "startTime": started,
            "completionTime": started,
            "succeeded": 1,
            "active": 0,
            "ready": 0,
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": started},
            ],
        }
    if state == "failed":
        return {
            "startTime": started,
            "failed": 4,
            "active": 0,
            "ready": 0,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": started,
                }
            ],
        }
    return {"startTime": started, "active": 1, "ready": 1}


def submit_lease(namespace: str, holder_user: str, now: datetime) -> dict[str, Any]:
    """The Gate A Lease, held by ``holder_user``'s submit path and stamped as the
    mutating webhook stamps it (the benchmark writes it directly)."""
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
