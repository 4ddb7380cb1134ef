"""Job bodies shaped like the dashboard's own Jobs, and its auto-stop probe's reading of them.

Besides the ElasticBLAST Jobs its submits create (:mod:`testbed.elastic_blast`), the
dashboard (elb-dashboard) creates three kinds of Job itself, with its admin credentials,
in the namespace it searches in (``default`` unless configured). Written from its public
builders (``api/services/warmup/jobs.py``, ``api/services/k8s/prepare_db_jobs.py``,
``api/services/db/order_oracle.py``):

* DB warm-up ``warm-<db>-<NN>`` (``app=elb-db-warmup``, ``db``, ``shard``): one per node,
  pinned by ``nodeName``, stages a shard onto the node's disk (hostPath
  ``/workspace/blast``); ``backoffLimit`` 1, ``activeDeadlineSeconds`` 3600, no TTL, no
  requests;
* prepare-db ``prepare-db-<db>-<version>`` (``app=elb-prepare-db``, ``db``,
  ``source-version``): one Indexed Job, ``completions`` = ``parallelism`` = shards, copies
  a database from NCBI into Storage; ``backoffLimitPerIndex`` 2, ``maxFailedIndexes`` =
  shards, TTL 3600, deadline 4 h, requests 200m / 256Mi, not pinned (a toleration only);
* DB order oracle ``oracle-<db>-<NN>-<run>`` (``app=elb-db-order-oracle``, ``db``,
  ``shard``, ``oracle-run``): one per warmed shard, pinned by ``nodeName`` to the node that
  holds it, dumps the shard's accession order to Storage for the finalizers that follow;
  ``backoffLimit`` 1, TTL 86400, no deadline, no requests.

Each body carries a ``creationTimestamp`` and a ``status`` like
:mod:`testbed.elastic_blast`'s, and goes to the API server through
:func:`testbed.elastic_blast.for_api`. :func:`probe_counts` is the dashboard's own
auto-stop probe (``api/services/auto_stop_live.py``) as it reads a namespace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from testbed.elastic_blast import IMAGE, env_list, job_body

WARMUP_APP = "elb-db-warmup"
PREPARE_DB_APP = "elb-prepare-db"
ORACLE_APP = "elb-db-order-oracle"
PREPARE_DB_IMAGE = "mcr.microsoft.com/azure-cli:2.81.0"
NODE_DB_PATH = "/workspace/blast"
BLAST_TOLERATION = {
    "key": "workload",
    "operator": "Equal",
    "value": "blast",
    "effect": "NoSchedule",
}

SOURCE_VERSION = "2026-11-20-01-05-02"
"""The NCBI release the prepare-db Job copies (its ``source-version``)."""
ORACLE_RUN = "20261129T115500Z"
"""The order oracle's run (its ``oracle-run``)."""

PROBED_APPS = ("blast", WARMUP_APP, PREPARE_DB_APP)
"""The ``app`` values the dashboard's auto-stop probe lists (Jobs and Pods)."""


def _fragment(name: str, limit: int = 48) -> str:
    """A name as the dashboard puts it into a Job name (lower case, ``-`` for the rest)."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:limit].strip("-") or "db"


def _on_node(
    node: str, name: str, script: str, env: dict[str, str], scripts: bool = False
) -> dict[str, Any]:
    """The pod of a Job pinned to ``node`` that runs ``script`` on the node's database
    disk (and with the warm-up scripts mounted, ``scripts``)."""
    mounts = [{"name": "db", "mountPath": "/blast/blastdb"}]
    volumes: list[dict[str, Any]] = [
        {"name": "db", "hostPath": {"path": NODE_DB_PATH, "type": "DirectoryOrCreate"}}
    ]
    if scripts:
        mounts.append({"name": "scripts", "mountPath": "/scripts"})
        volumes.append(
            {"name": "scripts", "configMap": {"name": "elb-warmup-scripts", "defaultMode": 0o755}}
        )
    container = {
        "name": name,
        "image": IMAGE,
        "command": ["bash", "-lc"],
        "args": [script],
        "env": env_list(**env),
        "volumeMounts": mounts,
    }
    return {
        "restartPolicy": "Never",
        "nodeName": node,
        "tolerations": [dict(BLAST_TOLERATION)],
        "containers": [container],
        "volumes": volumes,
    }


def warmup(db: str, shard: int, node: str) -> dict[str, Any]:
    """Stages shard ``shard`` of ``db`` onto ``node`` (``build_warmup_job_plan``)."""
    nn = f"{shard:02d}"
    labels = {"app": WARMUP_APP, "db": db, "shard": nn}
    env = {"ELB_SHARD_IDX": nn, "ELB_DB": f"{db}_shard_{nn}", "ELB_DB_MOL_TYPE": "nucl"}
    pod = _on_node(node, "warmup", "/scripts/warmup.sh", env, scripts=True)
    spec = {"backoffLimit": 1, "activeDeadlineSeconds": 3600}
    return job_body(f"warm-{_fragment(db)}-{nn}", labels, pod, spec)


def prepare_db(db: str, shards: int = 2) -> dict[str, Any]:
    """Copies ``db`` (the NCBI release :data:`SOURCE_VERSION`) from NCBI into Storage,
    ``shards`` pods at once (``build_prepare_db_job_manifest``)."""
    name = f"prepare-db-{_fragment(db, 24)}-{re.sub(r'[^0-9]', '', SOURCE_VERSION)[:14]}"
    labels = {"app": PREPARE_DB_APP, "db": db, "source-version": SOURCE_VERSION}
    pod = {
        "restartPolicy": "Never",
        "tolerations": [dict(BLAST_TOLERATION)],
        "containers": [
            {
                "name": "prepare-db",
                "image": PREPARE_DB_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["bash", "-lc"],
                "args": ["/scripts/prepare-db.sh"],
                "env": env_list(
                    ELB_DB_NAME=db, ELB_SOURCE_VERSION=SOURCE_VERSION, AZCOPY_CONCURRENCY_VALUE="16"
                ),
                "resources": {
                    "requests": {"cpu": "200m", "memory": "256Mi"},
                    "limits": {"memory": "1Gi"},
                },
                "volumeMounts": [{"name": "scripts", "mountPath": "/scripts"}],
            }
        ],
        "volumes": [{"name": "scripts", "configMap": {"name": name, "defaultMode": 0o755}}],
    }
    spec = {
        "completionMode": "Indexed",
        "completions": shards,
        "parallelism": shards,
        "backoffLimitPerIndex": 2,
        "maxFailedIndexes": shards,
        "ttlSecondsAfterFinished": 3600,
        "activeDeadlineSeconds": 4 * 60 * 60,
    }
    return job_body(name, labels, pod, spec)


def order_oracle(db: str, shard: int, node: str) -> dict[str, Any]:
    """Dumps the accession order of shard ``shard`` of ``db`` on the node that holds it
    (``build_db_order_oracle_job_plan``), in oracle run :data:`ORACLE_RUN`."""
    nn = f"{shard:02d}"
    labels = {"app": ORACLE_APP, "db": db, "shard": nn, "oracle-run": ORACLE_RUN}
    dump = "blastdbcmd -db \"${ELB_DB}\" -entry all -outfmt '%a'"
    env = {"ELB_DB": f"{db}_shard_{nn}", "ELB_DB_NAME": db, "ELB_SHARD": nn}
    pod = _on_node(node, "oracle", dump, env)
    spec = {"backoffLimit": 1, "ttlSecondsAfterFinished": 86400}
    name = f"oracle-{_fragment(db)}-{nn}-{_fragment(ORACLE_RUN)}"
    return job_body(name, labels, pod, spec)


# -- the dashboard's auto-stop probe ----------------------------------------------------


def unfinished(job: Mapping[str, Any]) -> bool:
    """Both existing paths' test of a Job still running (their probe and their count of
    active searches): no success, no ``completionTime``, no ``True`` ``Complete`` or
    ``Failed`` condition."""
    status = job.get("status") or {}
    if int(status.get("succeeded") or 0) > 0 or status.get("completionTime"):
        return False
    return not any(
        c.get("type") in ("Complete", "Failed") and str(c.get("status")).lower() == "true"
        for c in status.get("conditions") or ()
    )


def probe_counts(jobs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> int:
    """What the dashboard's probe counts as live work in a namespace (> 0: in use).

    It lists Jobs ``app in PROBED_APPS`` with ``fieldSelector status.successful=0`` and
    counts those :func:`unfinished`; and lists their Pods not ``Succeeded`` or
    ``Failed``: live Pods with no counted Job still count as one."""

    def probed(obj: Mapping[str, Any]) -> bool:
        return (obj.get("metadata") or {}).get("labels", {}).get("app") in PROBED_APPS

    counted = sum(1 for j in jobs if probed(j) and unfinished(j))
    ended = ("Succeeded", "Failed")
    live_pods = any(probed(p) and (p.get("status") or {}).get("phase") not in ended for p in pods)
    return counted or int(live_pods)
