"""ElasticBLAST's Jobs, shaped as its AKS templates write them, and how each one ends.

A search is created in elastic-blast's order: on a cold cluster a ``setup`` Job that
stages the database (``init-pv``, with ``elb-job-id``); on a warm one an
``import-queries`` setup Job without ``elb-job-id``; then the in-cluster ``submit`` Job
(cloud job submission) or the ``blast`` batch Jobs (direct mode); the ``finalizer``
last. Labels, names, ``restartPolicy`` and ``backoffLimit`` follow the templates
(``job-init-pv-aks``, ``job-submit-jobs-aks``, ``blast-batch-job-aks``,
``elb-finalizer-aks``), scaled down: tiny requests so a whole run's pods fit, and short
``backoffLimit``/``ttlSecondsAfterFinished`` so retries and TTL deletion happen within a
schedule.

The pods run on the control plane's kubelet stand-in, which reads what a container does
from pod-template annotations: it runs ``run-seconds`` and exits with the codes of
``exit-codes`` (one per pod of the Job). So a Job here really succeeds, fails and is
retried by the Job controller up to ``backoffLimit``, and is deleted by the TTL
controller, as on AKS.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from elbgate.kube.api import JOBS, KubeApi, path
from testbed.kubelet_stand_in import EXIT_CODES, RUN_SECONDS

BLAST_POOL = {"agentpool": "blastpool"}

Fate = Literal["ok", "retried", "failed"]
"""How a Job ends: succeeds at once; fails once, is retried and succeeds; fails for good."""

SHAPES: dict[str, tuple[str, ...]] = {
    "cold_cloud": ("setup", "submit", "finalizer"),
    "warm_cloud": ("import", "submit", "finalizer"),
    "direct": ("blast", "blast", "finalizer"),
}
"""Search shapes: the apps of its Jobs in creation order (``import`` is the warm-reuse
setup Job without ``elb-job-id``)."""

RUN_RANGE: dict[str, tuple[float, float]] = {
    "setup": (1.0, 3.0),
    "import": (0.5, 1.5),
    "submit": (1.5, 4.0),
    "blast": (2.0, 5.0),
    "finalizer": (1.0, 3.0),
}


@dataclass(frozen=True)
class JobPlan:
    """One Job of a search: what it is, how long its pods run, and how it ends."""

    app: str
    name: str
    run_seconds: float | None
    """``None``: its pods run until deleted."""
    fate: Fate
    ttl_seconds: int | None


def plan_search(rng: random.Random, shape: str, short_id: str) -> tuple[JobPlan, ...]:
    """The Jobs of one search, drawn from ``rng``."""
    plans = []
    for i, app in enumerate(SHAPES[shape]):
        roll = rng.random()
        fate: Fate = "ok" if roll < 0.7 else "retried" if roll < 0.85 else "failed"
        if app == "finalizer" and fate == "retried":
            fate = "ok"  # backoffLimit 0: the template pins it (not safely retryable)
        ttl = None if app == "finalizer" else rng.choice((2, 3, 5))
        run = round(rng.uniform(*RUN_RANGE[app]), 1)
        plans.append(JobPlan(app, job_name(app, short_id, i), run, fate, ttl))
    return tuple(plans)


def job_name(app: str, short_id: str, i: int = 0) -> str:
    """The name the templates give an ``app`` Job of a search (``i``: its place in it)."""
    return {
        "setup": f"init-pv-{short_id}",
        "import": f"import-queries-{short_id}",
        "submit": f"submit-jobs-{short_id}",
        "blast": f"blastn-batch-db{short_id}-job-{i}-{short_id}",
        "finalizer": f"elb-finalizer-{short_id}",
    }[app]


def job_body(namespace: str, plan: JobPlan, job_id: str, db: str) -> dict[str, Any]:
    """The batch/v1 Job, as elastic-blast would apply it."""
    app = "setup" if plan.app == "import" else plan.app  # the warm-reuse setup Job
    labels: dict[str, str] = {"app": app}
    if plan.app != "import":
        labels["elb-job-id"] = job_id
    if plan.app == "blast":
        labels["db"] = db
    # blast: OnFailure (its container restarts in place); the others: Never, a new pod,
    # so only they, with a retry allowed (not the finalizer), fail in a second pod too.
    restart = "OnFailure" if plan.app == "blast" else "Never"
    backoff = 0 if plan.app == "finalizer" else 1
    codes = {"ok": "0", "retried": "0", "failed": "1"}[plan.fate]
    if restart == "Never" and backoff and plan.fate != "ok":
        codes = {"retried": "1,0", "failed": "1,1"}[plan.fate]
    env = [{"name": "ELB_DB", "value": db}] if plan.app in ("setup", "blast") else []
    annotations = {EXIT_CODES: codes}
    if plan.run_seconds is not None:
        annotations[RUN_SECONDS] = str(plan.run_seconds)
    spec: dict[str, Any] = {
        "backoffLimit": backoff,
        "template": {
            "metadata": {"labels": dict(labels), "annotations": annotations},
            "spec": {
                "restartPolicy": restart,
                "nodeSelector": dict(BLAST_POOL),
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {
                        "name": app,
                        "image": "elbacr.azurecr.io/ncbi/elb:1.3.0",
                        "env": env,
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    }
                ],
            },
        },
    }
    if plan.ttl_seconds is not None:
        spec["ttlSecondsAfterFinished"] = plan.ttl_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": plan.name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def running_job(namespace: str, name: str, app: str, job_id: str) -> dict[str, Any]:
    """A search Job whose pods run until deleted."""
    return job_body(namespace, JobPlan(app, name, None, "ok", None), job_id, f"db-{job_id}")


async def create_job(api: KubeApi, *, body: dict[str, Any], namespace: str) -> Any:
    """POST one Job with elb-gate's client (what the submit path's ``kubectl create`` does)."""
    return await api.create(path(JOBS, namespace), body)
