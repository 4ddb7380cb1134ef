"""Synchronous reads for the submit path and the CLI: the census and the Lease,
made with the same requests as the webhook (``elbgate.kube.reads``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from client.errors import CoordinationError
from client.sync_kube import SyncKube
from elbgate.capacity import NodeView
from elbgate.census import Census, census
from elbgate.kube.api import CONFIGMAPS, ApiError, ApiUnavailable, path
from elbgate.kube.reads import (
    get_submit_lease,
    list_pool_nodes,
    list_search_jobs,
    list_unfinished_search_jobs,
)
from elbgate.names import ADMISSION_RECORD_CONFIGMAP, lease_name
from elbgate.reservations import split_searches_of
from elbgate.settings import GateSettings, RuleSettings


def read_census(
    kube: SyncKube,
    namespace: str,
    gate: GateSettings,
    now: datetime | None = None,
    *,
    exact_orphans: bool = False,
) -> Census:
    """One uncached LIST of the namespace's search Jobs, counted by
    :func:`elbgate.census.census`. By default only the unfinished ones, as the
    webhook reads them (the count is the same); ``exact_orphans`` also reads the
    finished ones, so a finalizer merging after its batch work is not listed as
    an orphan. Raises :class:`CoordinationError` on failure."""
    lister = list_search_jobs if exact_orphans else list_unfinished_search_jobs
    try:
        jobs = kube.run(lambda api: lister(api, namespace))
    except (ApiError, ApiUnavailable) as exc:
        raise CoordinationError("list jobs", namespace, exc, kube.config.host) from exc
    return census(jobs, now or datetime.now(UTC), gate.finalizer_grace_seconds)


def read_lease(kube: SyncKube, namespace: str) -> dict[str, Any] | None:
    """The namespace's submit Lease as raw JSON, ``None`` when it does not exist."""
    try:
        return kube.run(lambda api: get_submit_lease(api, namespace))
    except (ApiError, ApiUnavailable) as exc:
        raise CoordinationError(
            f"get lease {lease_name(namespace)}", namespace, exc, kube.config.host
        ) from exc


def read_split_searches(kube: SyncKube, namespace: str) -> dict[str, str] | str:
    """The searches the webhook opened as split shards (the admission record's
    ``split-searches.json``), or why the record could not be read."""
    try:
        record = kube.run(
            lambda api: api.get_or_none(path(CONFIGMAPS, namespace, ADMISSION_RECORD_CONFIGMAP))
        )
    except (ApiError, ApiUnavailable) as exc:
        return f"ConfigMap {namespace}/{ADMISSION_RECORD_CONFIGMAP}: {exc}"
    return split_searches_of(record)


def read_pool_nodes(kube: SyncKube, rules: RuleSettings) -> tuple[NodeView, ...]:
    """The search pool's Nodes (``ELB_GATE_CAPACITY_POOL_SELECTOR``), as the webhook's
    capacity rules see them. Raises :class:`CoordinationError` on failure."""
    selector = rules.capacity_pool_selector
    try:
        items = kube.run(lambda api: list_pool_nodes(api, selector))
    except (ApiError, ApiUnavailable) as exc:
        raise CoordinationError("list nodes", "", exc, kube.config.host) from exc
    return tuple(NodeView.from_dict(item) for item in items)
