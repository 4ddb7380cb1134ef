"""Read and compare-and-swap the namespace's admission record (:mod:`elbgate.reservations`),
and tell which of its reserved Jobs have finished.

The GET is a consistent read (no resourceVersion), and so is the census LIST that the
handler makes after it; the write names the resourceVersion read (PUT), or creates the
ConfigMap when none was read (POST). Either answers 409 when another admission wrote
first, 404 when the record was deleted in between: :class:`RecordChanged`, and the
handler reads and decides again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from elbgate.job_status import is_terminal
from elbgate.kube.api import CONFIGMAPS, JOBS, ApiError, ApiUnavailable, KubeApi, path
from elbgate.names import ADMISSION_RECORD_CONFIGMAP, TURNS_CONFIGMAP


class RecordChanged(Exception):
    """The record is not the one read: another admission wrote it first."""


def record_ref(namespace: str) -> str:
    """``ConfigMap <ns>/elb-gate-admissions`` as messages name it."""
    return f"ConfigMap {namespace}/{ADMISSION_RECORD_CONFIGMAP}"


async def get_record(api: KubeApi, namespace: str, deadline: float) -> dict[str, Any] | None:
    """The record's ConfigMap, or ``None`` when there is none yet."""
    return await api.get_or_none(
        path(CONFIGMAPS, namespace, ADMISSION_RECORD_CONFIGMAP), deadline=deadline
    )


async def write_record(api: KubeApi, body: dict[str, Any], deadline: float) -> None:
    """Write ``body`` if the record is still the one read (its resourceVersion, or
    absent when ``body`` names none). Raises :class:`RecordChanged` when it is not."""
    namespace = body["metadata"]["namespace"]
    try:
        if body["metadata"].get("resourceVersion"):
            await api.replace(
                path(CONFIGMAPS, namespace, ADMISSION_RECORD_CONFIGMAP), body, deadline=deadline
            )
        else:
            await api.create(path(CONFIGMAPS, namespace), body, deadline=deadline)
    except ApiError as exc:
        if exc.conflict or exc.not_found:
            raise RecordChanged(str(exc)) from None
        raise


async def get_turns(api: KubeApi, namespace: str, deadline: float) -> dict[str, Any] | None:
    """The fair-turn record's ConfigMap (:mod:`elbgate.turns`), or ``None``."""
    return await api.get_or_none(path(CONFIGMAPS, namespace, TURNS_CONFIGMAP), deadline=deadline)


async def write_turns(api: KubeApi, body: dict[str, Any], deadline: float) -> None:
    """Compare-and-swap the fair-turn record as :func:`write_record` does the admission
    record: :class:`RecordChanged` when another replica wrote it first."""
    namespace = body["metadata"]["namespace"]
    try:
        if body["metadata"].get("resourceVersion"):
            await api.replace(path(CONFIGMAPS, namespace, TURNS_CONFIGMAP), body, deadline=deadline)
        else:
            await api.create(path(CONFIGMAPS, namespace), body, deadline=deadline)
    except ApiError as exc:
        if exc.conflict or exc.not_found:
            raise RecordChanged(str(exc)) from None
        raise


async def finished_jobs(
    api: KubeApi, namespace: str, names: Iterable[str], deadline: float
) -> frozenset[str]:
    """Of the Jobs ``names`` (reserved, not in the census LIST), those a GET shows
    finished. One that is absent, unfinished or could not be read is not: it keeps
    counting (an over-count for a moment, never an under-count)."""

    async def finished(name: str) -> bool:
        try:
            found = await api.get_or_none(path(JOBS, namespace, name), deadline=deadline)
        except (ApiError, ApiUnavailable):
            return False
        return found is not None and is_terminal(found)

    wanted = sorted(set(names))
    if not wanted:
        return frozenset()
    done = await asyncio.gather(*(finished(n) for n in wanted))
    return frozenset(n for n, f in zip(wanted, done, strict=True) if f)
