"""ElasticBLAST Job bodies (testbed/elastic_blast.py) made ready for the control plane.

The shapes stay the templates' (labels, env, volumes, nodeSelector, backoff, TTL);
what changes is only what the API server and the kubelet stand-in need: the
namespace, no client-side status or creationTimestamp, how long the imaginary
container runs (``localkube.elb-gate.io/run-seconds``; absent: until deleted)
and, unless capacity is the point, requests small enough that a whole session's
Jobs fit the three blast-pool nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from testbed import elastic_blast as elb


def ready(
    body: dict[str, Any],
    namespace: str,
    *,
    run_seconds: float | None = None,
    keep_requests: bool = False,
) -> dict[str, Any]:
    """``body`` for ``namespace`` on the control plane."""
    requests = None if keep_requests else elb.SMALL_REQUESTS
    return elb.for_api(body, namespace, run_seconds=run_seconds, requests=requests)


def as_yaml(body: dict[str, Any]) -> str:
    return yaml.safe_dump(body, sort_keys=False)


def name(body: dict[str, Any]) -> str:
    return str(body["metadata"]["name"])


def search_id(body: dict[str, Any]) -> str:
    return str(body["metadata"]["labels"].get("elb-job-id", ""))


def busy_searches(count: int, first: int = 100) -> list[dict[str, Any]]:
    """``count`` searches already running: one batch Job each, on a database of its own,
    running until deleted."""
    return [elb.blast_batch(elb.search_id(first + i), 0, f"other-db-{i}") for i in range(count)]


def shard_batches(job_id: str, num_cpus: int, db: str = "core_nt") -> list[dict[str, Any]]:
    """A search that puts one batch pod on each of the three blast-pool nodes (the
    sharded local-SSD layout, pinned by ``nodeSelector ordinal``), requesting
    ``num_cpus - 2`` CPU each."""
    return [
        elb.blast_batch(job_id, n, f"{db}_shard_{n:02d}", num_cpus=num_cpus, shard=n)
        for n in range(3)
    ]


def names(bodies: Iterable[dict[str, Any]]) -> list[str]:
    return [name(b) for b in bodies]
