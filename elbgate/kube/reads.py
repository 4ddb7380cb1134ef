"""The reads every component makes the same way: the census LIST, the Lease GET, the
pool's Nodes.

Kept in one place so the webhook, the controller and the CLI send the same
selectors and therefore see the same Jobs.
"""

from __future__ import annotations

from typing import Any

from elbgate.kube.api import JOBS, LEASES, NODES, KubeApi, path
from elbgate.names import SEARCH_JOB_SELECTOR, UNFINISHED_JOB_FIELD_SELECTOR, lease_name


async def list_unfinished_search_jobs(
    api: KubeApi, namespace: str, deadline: float | None = None
) -> list[dict[str, Any]]:
    """Search Jobs (``app in (finalizer,blast,submit)``) that have not succeeded:
    one uncached LIST, raw dicts. Terminal-but-failed Jobs are filtered by the
    census, not here (a field selector cannot express the terminal test)."""
    body = await api.list_objects(
        path(JOBS, namespace),
        label_selector=SEARCH_JOB_SELECTOR,
        field_selector=UNFINISHED_JOB_FIELD_SELECTOR,
        deadline=deadline,
    )
    items = body.get("items")
    return items if isinstance(items, list) else []


async def list_search_jobs(
    api: KubeApi, namespace: str, deadline: float | None = None
) -> list[dict[str, Any]]:
    """Every search Job, finished ones included: what tells a finalizer that is
    merging after its batch work (finishing) from one whose batch work never
    appeared (orphan). For operator views; admission needs only the unfinished."""
    body = await api.list_objects(
        path(JOBS, namespace), label_selector=SEARCH_JOB_SELECTOR, deadline=deadline
    )
    items = body.get("items")
    return items if isinstance(items, list) else []


async def get_submit_lease(
    api: KubeApi, namespace: str, deadline: float | None = None
) -> dict[str, Any] | None:
    """The namespace's Gate A Lease, or ``None`` when it does not exist."""
    return await api.get_or_none(path(LEASES, namespace, lease_name(namespace)), deadline=deadline)


async def list_pool_nodes(
    api: KubeApi, label_selector: str = "", deadline: float | None = None
) -> list[dict[str, Any]]:
    """The Nodes of the search pool (``ELB_GATE_CAPACITY_POOL_SELECTOR``; every node
    when empty), as the webhook's Node watch cache lists them."""
    body = await api.list_objects(
        path(NODES), label_selector=label_selector.strip() or None, deadline=deadline
    )
    items = body.get("items")
    return items if isinstance(items, list) else []
