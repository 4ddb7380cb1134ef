"""Objects shaped like the ones elastic-blast and its submit paths really write.

Names, labels, restart policy and backoff follow elastic-blast's AKS templates
(``elb-finalizer-aks.yaml.template``, ``blast-batch-job-aks.yaml.template``,
``job-submit-jobs-aks.yaml.template``). Containers request 10m CPU so that a
whole session's Jobs fit on the control plane's nodes; their Pods run until
deleted, so a search stays active for as long as a test needs it.
"""

from __future__ import annotations

import uuid
from typing import Any

DB_LABEL = "core-nt"


def new_job_id() -> str:
    """An elastic-blast job id (a uuid4 without dashes)."""
    return uuid.uuid4().hex


def finalizer_job(namespace: str, job_id: str) -> dict[str, Any]:
    """elastic-blast's finalizer: ``elb-finalizer-<short id>``, app=finalizer, no retries."""
    return search_job("finalizer", namespace, job_id)


def blast_job(namespace: str, job_id: str, number: int = 0) -> dict[str, Any]:
    """One batch Job of a search: ``blastn-batch-<db>-job-<n>-<short id>``, app=blast."""
    return search_job("blast", namespace, job_id, number=number)


def search_job(
    app: str, namespace: str, job_id: str, name: str | None = None, number: int = 0
) -> dict[str, Any]:
    """A batch/v1 Job of one search (``app`` = finalizer, submit or blast)."""
    short = job_id[-8:]
    labels = {"app": app, "elb-job-id": job_id}
    default_name = {
        "finalizer": f"elb-finalizer-{short}",
        "submit": f"submit-jobs-{short}",
        "blast": f"blastn-batch-{DB_LABEL}-job-{number}-{short}",
    }.get(app, f"elb-{app}-{short}")
    if app == "blast":
        labels["db"] = DB_LABEL
    retries = app == "blast"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name or default_name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 5 if retries else 0,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "OnFailure" if retries else "Never",
                    "containers": [
                        {
                            "name": app,
                            "image": "elbacr.azurecr.io/ncbi/elb:1.4.0",
                            "command": ["/scripts/run.sh"],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        }
                    ],
                },
            },
        },
    }
