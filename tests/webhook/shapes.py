"""Objects shaped like the ones elastic-blast and its submit paths really write."""

from __future__ import annotations

import uuid
from typing import Any


def new_job_id() -> str:
    """An elastic-blast job id (a uuid4 without dashes)."""
    return uuid.uuid4().hex


def finalizer_job(namespace: str, job_id: str) -> dict[str, Any]:
    """elastic-blast's finalizer: ``elb-finalizer-<last 8 of id>``, app=finalizer, no retries."""
    return search_job("finalizer", namespace, job_id, f"elb-finalizer-{job_id[-8:]}")


def search_job(app: str, namespace: str, job_id: str, name: str | None = None) -> dict[str, Any]:
    """A batch/v1 Job of one search (``app`` = finalizer, submit or blast)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name or f"elb-{app}-{job_id[-8:]}",
            "namespace": namespace,
            "labels": {"app": app, "elb-job-id": job_id},
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": app, "elb-job-id": job_id}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": app,
                            "image": "ncbi/elasticblast-job-submit:4.0.0",
                            "command": ["/bin/sh", "-c", "true"],
                        }
                    ],
                },
            },
        },
    }
