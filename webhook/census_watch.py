"""Gate B's census read from the webhook's own Job watch, at a fence
(``ELB_GATE_CENSUS_READ=watch``; docs/design.md, "The census read at a fence").

The census LIST costs the API server a scan of the whole namespace for every judged
admission (its watch cache indexes Jobs by namespace and name only): 350 ms of its CPU
per admission at 80,000 Jobs (docs/benchmarks.md). Here each replica keeps the same
Jobs — ``app in (…)``, ``status.successful=0`` — in a LIST + WATCH of its own, one per
gated namespace: the configured ones (``ELB_GATE_NAMESPACES``) from start-up, any other
from its first census read until it goes unread for ``IDLE_SECONDS``.

A cache alone may be behind: a Job stored a moment ago may not have reached it. So a
read first writes the namespace's fence Job (a suspended Job the chart creates, which
the same watch selects): a merge patch of one annotation to a value never written
before, so the API server stores a new revision ``F``. Every Job write that completed
before the patch has a revision below ``F``, and a watch delivers events in revision
order, so once the fence Job's event at ``F`` has arrived the cache holds every such
write: it is what a consistent LIST at ``F`` would return, taken after the record's
GET, inside the request. That is what the census LIST gives today, so every rule
built on it holds as it is.

Whenever the cache cannot say (not synced yet, watch broken, the fence Job missing or
forbidden, its event not in within the wait), the caller LISTs as before: this read
can only be faster, never different. A fence write that gets no answer at all is a
read that failed (the caller refuses, as when the LIST gets none).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from elbgate.kube.api import JOBS, ApiError, KubeApi, path
from elbgate.kube.informer import Informer, WatchMetrics, WatchSpec
from elbgate.logs import log
from elbgate.names import (
    APP_LABEL,
    CENSUS_FENCE_ANNOTATION,
    CENSUS_FENCE_APP,
    SEARCH_APPS,
    UNFINISHED_JOB_FIELD_SELECTOR,
)

logger = logging.getLogger("webhook.census_watch")

WATCH_SELECTOR = f"{APP_LABEL} in ({','.join((*SEARCH_APPS, CENSUS_FENCE_APP))})"
"""The census's Jobs and the namespace's fence Job, in one watch."""
IDLE_SECONDS = 60.0
"""A namespace not in ``ELB_GATE_NAMESPACES`` whose census was not read for this long
has its watch stopped (a namespace gated later, or no longer): the next read LISTs and
starts it again. The configured namespaces are watched from start-up, always."""
RELIST_BACKOFF_MAX_SECONDS = 30.0
"""A watch that keeps failing (its namespace's RoleBinding missing) retries this
seldom at most: meanwhile the census is LISTed, as without the watch."""
FENCE_RETRY_SECONDS = 30.0
"""After the fence Job refused a write for good (missing, forbidden), how long a
namespace's census is LISTed before the fence is tried again. Any other error (a 5xx,
a 429) sends that one read to the LIST."""
FENCE_GONE = frozenset({403, 404})


class CensusReadMetrics(WatchMetrics, Protocol):
    def record_census_read(self, source: str, reason: str) -> None: ...
    def record_census_fence(self, phase: str, seconds: float) -> None: ...


class _Namespace:
    """One namespace's unfinished search Jobs (an informer sink) and how far they go."""

    def __init__(self, fence_job: str) -> None:
        self.fence_job = fence_job
        self.by_name: dict[str, dict[str, Any]] = {}
        self.synced = False
        self.revision = 0
        """The cache holds every write up to this revision (0: none known)."""
        self._moved = asyncio.Event()

    def replace(self, kind: str, namespace: str, items: Iterable[Mapping[str, Any]]) -> None:
        self.by_name = {_name(obj): dict(obj) for obj in items}
        self.synced = True

    def apply(self, kind: str, namespace: str, event_type: str, obj: Mapping[str, Any]) -> None:
        if event_type == "DELETED":
            self.by_name.pop(_name(obj), None)
        else:
            self.by_name[_name(obj)] = dict(obj)

    def mark_unsynced(self, kind: str, namespace: str) -> None:
        self.synced = False
        self.revision = 0
        self._wake()

    def progress(self, resource_version: str) -> None:
        try:
            self.revision = max(self.revision, int(resource_version))
        except ValueError:
            return  # not an etcd revision: no fenced read can be judged against it
        self._wake()

    def _wake(self) -> None:
        self._moved.set()
        self._moved = asyncio.Event()

    async def reached(self, revision: int, seconds: float) -> bool:
        """Wait until the cache holds every write up to ``revision``, at most
        ``seconds``; ``False`` when it does not (or stopped being synced)."""
        loop = asyncio.get_running_loop()
        ends = loop.time() + seconds
        while self.synced and self.revision < revision:
            left = ends - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._moved.wait(), left)
            except TimeoutError:
                return False
        return self.synced

    def jobs(self) -> list[dict[str, Any]]:
        """The cached Jobs but the fence, as stored (the census only reads them: no
        copy on the request path)."""
        return [obj for name, obj in self.by_name.items() if name != self.fence_job]


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class CensusWatch:
    """The per-namespace Job watches and the fenced read over them."""

    def __init__(
        self,
        api: KubeApi,
        metrics: CensusReadMetrics,
        fence_job: str,
        *,
        wait_seconds: float,
        namespaces: tuple[str, ...] = (),
        watch_timeout_seconds: int = 300,
    ) -> None:
        self.api = api
        self.namespaces = frozenset(namespaces)
        """Watched from :meth:`start` on and never stopped (``ELB_GATE_NAMESPACES``)."""
        self.metrics = metrics
        self.fence_job = fence_job
        self.wait_seconds = wait_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self._views: dict[str, _Namespace] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._read_at: dict[str, float] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._refused: dict[str, float] = {}
        """Namespace → when to try its fence again (it refused a write)."""
        self._tokens = itertools.count()
        self._replica = secrets.token_hex(8)
        """Each value written is new, also after a restart: a patch that wrote what the
        Job already holds would store no new revision and fence nothing."""

    def start(self) -> None:
        """Watch the configured namespaces now, so that their first admission after a
        start is read from the watch already (call from the running loop)."""
        for namespace in sorted(self.namespaces):
            self._view(namespace)

    async def _sweep(self) -> None:
        """Stop the watches of namespaces not configured and not read for a while."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(IDLE_SECONDS / 4)
            idle = loop.time() - IDLE_SECONDS
            for namespace in [n for n, at in self._read_at.items() if at < idle]:
                if namespace in self.namespaces:
                    continue
                del self._read_at[namespace]
                self._views.pop(namespace, None)
                task = self._tasks.pop(namespace, None)
                if task is not None:
                    task.cancel()

    def _view(self, namespace: str) -> _Namespace:
        loop = asyncio.get_running_loop()
        self._read_at[namespace] = loop.time()
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep())
        view = self._views.get(namespace)
        if view is None:
            view = self._views[namespace] = _Namespace(self.fence_job)
            informer = Informer(
                self.api,
                view,
                WatchSpec(
                    "jobs",
                    namespace,
                    path(JOBS, namespace),
                    label_selector=WATCH_SELECTOR,
                    field_selector=UNFINISHED_JOB_FIELD_SELECTOR,
                ),
                self.metrics,
                watch_timeout_seconds=self.watch_timeout_seconds,
                backoff_max=RELIST_BACKOFF_MAX_SECONDS,
                on_progress=view.progress,
            )
            self._tasks[namespace] = loop.create_task(informer.run())
        return view

    async def close(self) -> None:
        tasks = [*self._tasks.values(), *([self._sweeper] if self._sweeper else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._views.clear()
        self._sweeper = None

    async def jobs(self, namespace: str, deadline: float) -> list[dict[str, Any]] | None:
        """The namespace's unfinished search Jobs as of a fence written now, or ``None``
        when the cache cannot say (the caller LISTs). Raises
        :class:`~elbgate.kube.api.ApiUnavailable` when the fence write gets no answer."""
        view = self._view(namespace)
        if not view.synced:
            self.metrics.record_census_read("list", "not_synced")
            return None
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._refused.get(namespace, now) > now:
            self.metrics.record_census_read("list", "fence_refused")
            return None
        token = f"{self._replica}-{next(self._tokens)}"
        try:
            written = await self.api.merge_patch(
                path(JOBS, namespace, self.fence_job),
                {"metadata": {"annotations": {CENSUS_FENCE_ANNOTATION: token}}},
                deadline=deadline,
            )
            revision = int((written.get("metadata") or {}).get("resourceVersion") or "")
            self.metrics.record_census_fence("write", loop.time() - now)
        except (ApiError, ValueError) as exc:
            self.metrics.record_census_read("list", "fence_refused")
            if not (isinstance(exc, ApiError) and exc.code in FENCE_GONE):
                return None  # this read only: the next one writes the fence again
            if namespace not in self._refused:  # once while it refuses, not per admission
                log(
                    logger,
                    logging.WARNING,
                    "census fence not written; the census is LISTed",
                    namespace=namespace,
                    fence_job=self.fence_job,
                    detail=str(exc),
                    retry_seconds=FENCE_RETRY_SECONDS,
                )
            self._refused[namespace] = now + FENCE_RETRY_SECONDS
            return None
        self._refused.pop(namespace, None)
        written_at = loop.time()
        reached = await view.reached(revision, self.wait_seconds)
        self.metrics.record_census_fence("wait", loop.time() - written_at)
        if not reached:
            self.metrics.record_census_read("list", "watch_behind")
            return None
        self.metrics.record_census_read("watch", "fenced")
        return view.jobs()
