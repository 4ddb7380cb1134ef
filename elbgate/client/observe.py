"""Synchronous reads for the submit path and the CLI: the census and the Lease,
made with the same requests as the webhook (``elbgate.kube.reads``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from elbgate.census import Census, census
from elbgate.client.errors import CoordinationError
from elbgate.client.sync_kube import SyncKube
from elbgate.kube.api import ApiError, ApiUnavailable
from elbgate.kube.reads import get_submit_lease, list_unfinished_search_jobs
from elbgate.names import lease_name
from elbgate.settings import Settings


def read_census(
    kube: SyncKube, namespace: str, settings: Settings, now: datetime | None = None
) -> Census:
    """One uncached LIST of the namespace's unfinished search Jobs, counted by
    :func:`elbgate.census.census`. Raises :class:`CoordinationError` on failure."""
    try:
        jobs = kube.run(lambda api: list_unfinished_search_jobs(api, namespace))
    except (ApiError, ApiUnavailable) as exc:
        raise CoordinationError("list jobs", namespace, exc, kube.config.host) from exc
    return census(jobs, now or datetime.now(UTC), settings.finalizer_grace_seconds)


def read_lease(kube: SyncKube, namespace: str) -> dict[str, Any] | None:
    """The namespace's submit Lease as raw JSON, ``None`` when it does not exist."""
    try:
        return kube.run(lambda api: get_submit_lease(api, namespace))
    except (ApiError, ApiUnavailable) as exc:
        raise CoordinationError(
            f"get lease {lease_name(namespace)}", namespace, exc, kube.config.host
        ) from exc
