"""Job bodies shaped like ElasticBLAST's AKS templates, and the order submit applies them.

Written from the public elastic-blast-azure templates (``src/elastic_blast/templates/``
and ``kubernetes.py``/``azure.py``): the labels, env, volumes, resources, node
selectors, backoff limits and TTLs those Jobs carry, with values in the ranges
the live measurements saw. What each flow creates, in order:

* cold, local SSD: ``init-ssd-<id8>-<n>`` (``app=setup``, one per node, ``ELB_DB``,
  hostPath ``/workspace`` mounted at ``/blast/blastdb``) → batch Jobs or the
  ``submit-jobs`` Job → ``elb-finalizer-<id8>``;
* cold, persistent volume: ``init-pv`` (``app=setup``, PVC ``blast-dbs-pvc-rwm``) → …;
* partitioned: ``init-pv-partitioned`` (``ELB_PARTITION_PREFIX``, no ``ELB_DB``) →
  batch Jobs per partition → finalizer;
* sharded: ``init-ssd-<id8>-<n>`` per node, each one shard (``ELB_DB`` = shard name,
  ``nodeSelector ordinal``) → shard batch Jobs pinned per node → finalizer;
* warm reuse: ``import-queries`` (``app=setup``, no ``elb-job-id``) → …;
* cloud job submission: ``submit-jobs-<id8>`` (``app=submit``), which later creates
  the batch Jobs in-cluster under its own service account, holding no Lease;
* prepare only: the setup Jobs alone.

The bodies are what a table test feeds the census or the webhook's decisions: each
carries a ``creationTimestamp`` 5 s before :data:`REFERENCE_TIME` and an active
``status``. :func:`for_api` turns one into what ``elastic-blast`` sends the API
server (no status, no timestamps), in a namespace, with the
``localkube.elb-gate.io/run-seconds`` the kubelet stand-in runs its pods for.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from testbed.kubelet_stand_in import RUN_SECONDS

REFERENCE_TIME = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
"""The instant the bodies' ``creationTimestamp`` are relative to (the tables' "now")."""


def ts(seconds_ago: float) -> str:
    """An RFC 3339 timestamp ``seconds_ago`` before :data:`REFERENCE_TIME`."""
    return (REFERENCE_TIME - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


IMAGE = "elbacr.azurecr.io/ncbi/elb:1.4.0"
QS_IMAGE = "elbacr.azurecr.io/ncbi/elasticblast-query-split:0.1.4"
RESULTS = "https://elbstorage.blob.core.windows.net/results"
SUBMITTER_SA = "system:serviceaccount:default:default"
"""The in-cluster submit Job runs as the namespace's default service account."""


def env_list(**values: str) -> list[dict[str, str]]:
    """A container's ``env``: one ``{name, value}`` per keyword, in order."""
    return [{"name": k, "value": v} for k, v in values.items()]


def job_body(
    name: str, labels: dict[str, str], pod: dict[str, Any], spec: dict[str, Any]
) -> dict[str, Any]:
    """A Job as a table reads it: ``spec`` around the pod template ``pod``, created 5 s
    before :data:`REFERENCE_TIME` in ``default``, one pod active."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels,
            "creationTimestamp": ts(5.0),
        },
        "spec": {**spec, "template": {"metadata": {"labels": dict(labels)}, "spec": pod}},
        "status": {"active": 1},
    }


def _job(
    name: str,
    labels: dict[str, str],
    pod: dict[str, Any],
    *,
    backoff_limit: int,
    ttl: int | None = None,
    deadline: int | None = None,
) -> dict[str, Any]:
    spec = {
        "backoffLimit": backoff_limit,
        "completions": 1,  # the API server's default when neither is set
        "parallelism": 1,
        "ttlSecondsAfterFinished": ttl,
        "activeDeadlineSeconds": deadline,
    }
    return job_body(name, labels, pod, {k: v for k, v in spec.items() if v is not None})


def _get_blastdb(db: str, mounts: list[dict[str, Any]], **env: str) -> dict[str, Any]:
    """The container that downloads ``db`` (init-db-download-aks.sh); ``env`` adds to
    its environment."""
    return {
        "name": "get-blastdb",
        "image": IMAGE,
        "workingDir": "/blast/blastdb",
        "volumeMounts": mounts,
        "env": env_list(
            BLAST_USAGE_REPORT="false",
            ELB_DB=db,
            ELB_DB_PATH="",
            ELB_BLASTDB_SRC="NCBI",
            ELB_DB_MOL_TYPE="nucl",
            ELB_TAXIDLIST="",
            ELB_SKIP_DB_VERIFY="true",
            **env,
        ),
        "command": ["/scripts/init-db-download-aks.sh"],
    }


def init_ssd(job_id: str, node: int, db: str = "core_nt") -> dict[str, Any]:
    """Stages ``db`` onto node ``node``'s local SSD (job-init-local-ssd-aks)."""
    labels = {"app": "setup", "elb-job-id": job_id}
    pod = {
        "volumes": [
            {"name": "blastdb", "hostPath": {"path": "/workspace"}},
            {"name": "scripts", "configMap": {"name": "elb-scripts", "defaultMode": 0o755}},
        ],
        "containers": [
            _get_blastdb(
                db,
                [
                    {"name": "blastdb", "mountPath": "/blast/blastdb", "subPath": "blast"},
                    {"name": "scripts", "mountPath": "/scripts", "readOnly": True},
                ],
                STARTUP_DELAY="30",
            ),
            {
                "name": "import-query-batches",
                "image": QS_IMAGE,
                "workingDir": "/blast/queries",
                "volumeMounts": [
                    {"name": "blastdb", "mountPath": "/blast/queries", "subPath": "queries"}
                ],
                "command": ["run.sh", "-i", "None", "-o", RESULTS, "-b", "5000000", "-c", "1"],
            },
        ],
        "restartPolicy": "Never",
        "nodeSelector": {"ordinal": str(node)},
    }
    return _job(f"init-ssd-{job_id[-8:]}-{node}", labels, pod, backoff_limit=3, deadline=3600)


def init_ssd_shard(job_id: str, node: int, prefix: str = "core_nt_shard_") -> dict[str, Any]:
    """Stages shard ``node`` of a sharded database onto node ``node`` (job-init-ssd-shard-aks)."""
    job = init_ssd(job_id, node, db=f"{prefix}{node:02d}")
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["env"] = env_list(
        BLAST_USAGE_REPORT="false",
        ELB_SHARD_IDX=f"{node:02d}",
        ELB_PARTITION_PREFIX=f"https://elbstorage.blob.core.windows.net/blast-db/{prefix}",
        ELB_DB=f"{prefix}{node:02d}",
        ELB_DB_MOL_TYPE="nucl",
        STARTUP_DELAY="30",
    )
    container["command"] = ["/scripts/init-db-shard-aks.sh"]
    return job


def init_pv(job_id: str | None, db: str = "16S_ribosomal_RNA") -> dict[str, Any]:
    """Stages ``db`` onto the shared ReadWriteMany volume (job-init-pv-aks); ``None``: a
    setup Job without ``elb-job-id``."""
    labels = {"app": "setup", **({"elb-job-id": job_id} if job_id else {})}
    pod = {
        "volumes": [
            {"name": "blastdb", "persistentVolumeClaim": {"claimName": "blast-dbs-pvc-rwm"}},
            {"name": "scripts", "configMap": {"name": "elb-scripts", "defaultMode": 0o755}},
        ],
        "containers": [
            _get_blastdb(db, [{"name": "blastdb", "mountPath": "/blast/blastdb"}]),
            {"name": "import-query-batches", "image": QS_IMAGE, "command": ["run.sh"]},
        ],
        "restartPolicy": "Never",
    }
    return _job("init-pv", labels, pod, backoff_limit=9, deadline=3600)


def init_pv_partitioned(job_id: str, prefix: str = "core_nt_part_") -> dict[str, Any]:
    """Stages every partition of a database onto the volume (job-init-pv-partitioned-aks)."""
    labels = {"app": "setup", "elb-job-id": job_id}
    pod = {
        "volumes": [
            {"name": "blast-dbs", "persistentVolumeClaim": {"claimName": "blast-dbs-pvc-rwm"}}
        ],
        "initContainers": [
            {
                "name": "get-blastdb",
                "image": IMAGE,
                "env": env_list(
                    ELB_NUM_PARTITIONS="10",
                    ELB_PARTITION_PREFIX=f"https://elbstorage.blob.core.windows.net/db/{prefix}",
                ),
                "command": ["/scripts/init-db-partitioned-aks.sh"],
            }
        ],
        "containers": [{"name": "import-query-batches", "image": QS_IMAGE, "command": ["run.sh"]}],
        "restartPolicy": "Never",
    }
    return _job("init-pv-partitioned", labels, pod, backoff_limit=3, deadline=3600)


def import_queries() -> dict[str, Any]:
    """Warm reuse: copies the query batches only; no ``elb-job-id`` (import_query_batches_only)."""
    pod = {
        "volumes": [
            {"name": "blastdb", "persistentVolumeClaim": {"claimName": "blast-dbs-pvc-rwm"}}
        ],
        "containers": [
            {
                "name": "import-query-batches",
                "image": QS_IMAGE,
                "workingDir": "/blast/queries",
                "command": ["run.sh", "-i", "None", "-o", RESULTS, "-b", "5000000", "-c", "1"],
            }
        ],
        "restartPolicy": "Never",
    }
    return _job("import-queries", {"app": "setup"}, pod, backoff_limit=3, deadline=600)


def cloud_split() -> dict[str, Any]:
    """Splits the query in the cloud before a local-SSD search; no ``elb-job-id``."""
    pod = {
        "containers": [{"name": "import-query-batches", "image": QS_IMAGE, "command": ["run.sh"]}],
        "restartPolicy": "Never",
    }
    return _job("cloud-split-ssd", {"app": "setup"}, pod, backoff_limit=3, deadline=3600)


def submit_jobs(job_id: str, num_nodes: int = 10) -> dict[str, Any]:
    """Cloud job submission: creates the batch Jobs in-cluster later (job-submit-jobs-aks)."""
    labels = {"app": "submit", "elb-job-id": job_id}
    pod = {
        "volumes": [{"name": "workspace", "emptyDir": {}}],
        "containers": [
            {
                "name": "submit-jobs",
                "image": "elbacr.azurecr.io/ncbi/elasticblast-job-submit:4.1.0",
                "imagePullPolicy": "Always",
                "env": env_list(
                    ELB_RESULTS=f"{RESULTS}/{job_id}",
                    ELB_CLUSTER_NAME="elb-cluster-02",
                    ELB_NUM_NODES=str(num_nodes),
                    ELB_USE_LOCAL_SSD="true",
                    ELB_METADATA_DIR="metadata",
                ),
                "workingDir": "/workspace",
            }
        ],
        "restartPolicy": "Never",
    }
    return _job(f"submit-jobs-{job_id[-8:]}", labels, pod, backoff_limit=0)


def blast_batch(
    job_id: str,
    n: int,
    db: str = "16S_ribosomal_RNA",
    *,
    num_cpus: int = 8,
    mem_request: str = "4G",
    shard: int | None = None,
    ttl: int = 1800,
) -> dict[str, Any]:
    """One batch of a search (blast-batch-job-local-ssd-aks; ``shard``: the sharded
    variant, pinned to its node). Requests cpu = num-cpus - 2, memory ELB_MEM_REQUEST."""
    labels = {"app": "blast", "db": db, "elb-job-id": job_id}
    if shard is not None:
        labels["shard"] = f"{shard:02d}"
    pod: dict[str, Any] = {
        "volumes": [
            {"name": "blast-dbs", "hostPath": {"path": "/workspace", "type": "DirectoryOrCreate"}},
            {"name": "shared-data", "emptyDir": {}},
        ],
        "activeDeadlineSeconds": 18000,
        "initContainers": [
            {
                "name": "import-query-batches",
                "image": IMAGE,
                "command": ["/scripts/query-download-ssd-aks.sh"],
            }
        ],
        "containers": [
            {
                "name": "blast",
                "image": IMAGE,
                "workingDir": "/blast/blastdb",
                "resources": {
                    "requests": {"memory": mem_request, "cpu": str(num_cpus - 2)},
                    "limits": {"memory": "126Gi", "cpu": str(num_cpus)},
                },
                "volumeMounts": [
                    {"name": "blast-dbs", "mountPath": "/blast/blastdb", "subPath": "blast"}
                ],
                "env": env_list(
                    BLAST_ELB_JOB_ID=job_id,
                    BLAST_ELB_BATCH_NUM=str(n),
                    JOB_NUM=str(n),
                    ELB_BLAST_PROGRAM="blastn",
                    ELB_DB=db,
                    ELB_NUM_CPUS=str(num_cpus),
                ),
                "command": ["/scripts/blast-run-aks.sh"],
            },
            {
                "name": "results-export",
                "image": IMAGE,
                "command": ["/scripts/results-export-aks.sh"],
            },
        ],
        "restartPolicy": "OnFailure",
    }
    if shard is not None:
        pod["nodeSelector"] = {"ordinal": str(shard)}
    label = db.replace("_", "-").lower()
    return _job(
        f"blastn-batch-{label}-job-{n}-{job_id[-8:]}", labels, pod, backoff_limit=3, ttl=ttl
    )


def finalizer(job_id: str) -> dict[str, Any]:
    """The search's last Job, applied by submit() (elb-finalizer-aks); no TTL, no retry."""
    labels = {"app": "finalizer", "elb-job-id": job_id}
    pod = {
        "serviceAccountName": "default",
        "containers": [
            {
                "name": "finalizer",
                "image": IMAGE,
                "env": env_list(ELB_RESULTS=f"{RESULTS}/{job_id}", BLAST_ELB_JOB_ID=job_id),
                "command": ["/scripts/elb-finalizer-aks.sh"],
            }
        ],
        "restartPolicy": "Never",
    }
    return _job(f"elb-finalizer-{job_id[-8:]}", labels, pod, backoff_limit=0)


def search_id(n: int | None = None) -> str:
    """An ElasticBLAST-style ``elb-job-id`` (``job-`` + 32 hex digits): the ``n``-th of a
    table's, or, without ``n``, a new one (a uuid4) for a search on the control plane."""
    return f"job-{uuid.uuid4().hex if n is None else f'{n:032x}'}"


def flows(
    job_id: str, db: str = "16S_ribosomal_RNA", nodes: int = 3
) -> dict[str, list[dict[str, Any]]]:
    """Each kind of ``elastic-blast submit`` (or ``prepare``) → the Jobs it creates, in order."""
    batches = [blast_batch(job_id, n, db) for n in range(nodes)]
    init_ssds = [init_ssd(job_id, n, db) for n in range(nodes)]
    shards = [init_ssd_shard(job_id, n, f"{db}_shard_") for n in range(nodes)]
    shards += [blast_batch(job_id, n, f"{db}_shard_{n:02d}", shard=n) for n in range(nodes)]
    parts = [blast_batch(job_id, n, f"part{n:02d}") for n in range(nodes)]
    last = finalizer(job_id)
    return {
        "cold-local-ssd": [*init_ssds, *batches, last],
        "cold-pv": [init_pv(job_id, db), *batches, last],
        "partitioned": [init_pv_partitioned(job_id, f"{db}_part_"), *parts, last],
        "sharded": [*shards, last],
        "warm-reuse": [import_queries(), *batches, last],
        "cloud-job-submission": [submit_jobs(job_id, nodes), last],
        "prepare-only": init_ssds,
    }


def flow(
    kind: str, job_id: str, db: str = "16S_ribosomal_RNA", nodes: int = 3
) -> list[dict[str, Any]]:
    """The Jobs one ``elastic-blast submit`` (or ``prepare``) of ``kind`` creates, in order."""
    return flows(job_id, db, nodes)[kind]


FLOWS = tuple(flows(search_id(0)))


SMALL_REQUESTS = {"cpu": "10m", "memory": "16Mi"}
"""Requests small enough that a whole test session's Jobs fit the control plane's nodes."""


def for_api(
    job: dict[str, Any],
    namespace: str,
    *,
    run_seconds: float | None = None,
    requests: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``job`` as ``elastic-blast submit`` sends it: in ``namespace``, without the
    ``status`` and ``creationTimestamp`` the API server sets. ``run_seconds``: how long
    its pods run on the control plane's kubelet stand-in (absent: until deleted).
    ``requests`` (e.g. :data:`SMALL_REQUESTS`): what every container that requests
    resources requests instead, without limits, where capacity is not the point."""
    body = copy.deepcopy(job)
    body.pop("status", None)
    body["metadata"].pop("creationTimestamp", None)
    body["metadata"]["namespace"] = namespace
    template = body["spec"]["template"]
    if run_seconds is not None:
        template.setdefault("metadata", {}).setdefault("annotations", {})[RUN_SECONDS] = (
            f"{run_seconds:g}"
        )
    if requests is not None:
        for key in ("initContainers", "containers"):
            for container in template["spec"].get(key) or []:
                resources = container.get("resources")
                if resources:
                    resources["requests"] = dict(requests)
                    resources.pop("limits", None)
    return body


def ready(
    job: dict[str, Any], namespace: str, *, run_seconds: float | None = None
) -> dict[str, Any]:
    """``job`` as :func:`for_api` makes it, with :data:`SMALL_REQUESTS`: for the control
    plane, where a whole test session's Jobs must fit its nodes."""
    return for_api(job, namespace, run_seconds=run_seconds, requests=SMALL_REQUESTS)


def busy_searches(count: int, first: int = 100) -> list[dict[str, Any]]:
    """``count`` searches already running: one batch Job each, on a database of its own."""
    return [blast_batch(search_id(first + i), 0, f"other-db-{i}") for i in range(count)]
