"""LIST + WATCH loops that keep a cache current, one per (kind, namespace).

Shared by the controller (Jobs, Leases, holder pods and nodes) and the webhook
(the Node watch cache of the capacity rules):

* LIST (paged) → :meth:`Cache.replace` → synced; then WATCH from the list's
  resourceVersion, each event through :meth:`Cache.apply` (the hot path).
* a watch that ends normally (server timeout) is resumed from the last resourceVersion;
* a 410 Gone, a dropped connection or an API error marks the kind unsynced in that
  namespace (so it is not reconciled on stale data) and relists, with backoff on errors.
* nothing here raises: an unexpected error is logged and treated like a failed watch.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from elbgate.kube.api import ApiError, ApiUnavailable, KubeApi
from elbgate.logs import log

logger = logging.getLogger("elbgate.kube.informer")

LIST_DEADLINE_SECONDS = 120
"""The whole relist (every page): a namespace's history is read in pages of
``elbgate.kube.api.PAGE_SIZE``."""


class WatchMetrics(Protocol):
    """What an informer records: each component's metrics implement it."""

    def record_api_error(self, verb: str, resource: str) -> None: ...

    def record_watch_restart(self, resource: str) -> None: ...


class Sink(Protocol):
    """Where an informer puts what it lists and watches (the controller's cache and
    holder records, the webhook's Node watch cache)."""

    def replace(self, kind: str, namespace: str, items: Iterable[Mapping[str, Any]]) -> None: ...

    def apply(self, kind: str, namespace: str, event_type: str, obj: Mapping[str, Any]) -> None: ...

    def mark_unsynced(self, kind: str, namespace: str) -> None: ...


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """What to list and watch for one kind in one namespace."""

    kind: str
    """Cache kind (``jobs``, ``leases``, ``configmaps``)."""
    namespace: str
    url_path: str
    label_selector: str | None = None
    field_selector: str | None = None


class Informer:
    """Keeps one :class:`WatchSpec` mirrored in the cache until cancelled."""

    def __init__(
        self,
        api: KubeApi,
        cache: Sink,
        spec: WatchSpec,
        metrics: WatchMetrics,
        *,
        watch_timeout_seconds: int = 300,
        backoff_initial: float = 0.2,
        backoff_max: float = 5.0,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self.cache = cache
        self.spec = spec
        self.metrics = metrics
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.on_progress = on_progress
        """Told the resourceVersion the cache is complete up to: after each LIST and each
        watch event (BOOKMARKs included), once the cache holds it."""
        self.resource_version = ""
        self.last_error = ""
        """Why the last list/watch failed (``""`` once a LIST succeeded again)."""

    def _fields(self) -> dict[str, Any]:
        return {"resource": self.spec.kind, "namespace": self.spec.namespace}

    async def run(self) -> None:
        """List and watch forever (until cancelled)."""
        delay = self.backoff_initial
        while True:
            try:
                await self._list()
                delay = self.backoff_initial
                await self._watch_until_broken()
                # A 410 Gone: the history we resume from is gone; relist at once.
                self.cache.mark_unsynced(self.spec.kind, self.spec.namespace)
                self.metrics.record_watch_restart(self.spec.kind)
                continue
            except asyncio.CancelledError:
                raise
            except (ApiError, ApiUnavailable) as exc:
                self.last_error = str(exc)
                self.metrics.record_api_error("watch", self.spec.kind)
                log(
                    logger,
                    logging.WARNING,
                    "list/watch failed; relisting after backoff",
                    detail=str(exc),
                    backoff_seconds=round(delay, 2),
                    **self._fields(),
                )
            except Exception as exc:
                self.last_error = f"{exc.__class__.__name__}: {exc}"
                log(
                    logger,
                    logging.ERROR,
                    "list/watch crashed; relisting after backoff",
                    exc_info=True,
                    **self._fields(),
                )
            self.cache.mark_unsynced(self.spec.kind, self.spec.namespace)
            self.metrics.record_watch_restart(self.spec.kind)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(self.backoff_max, delay * 2)

    async def _list(self) -> None:
        body = await self.api.list_objects(
            self.spec.url_path,
            label_selector=self.spec.label_selector,
            field_selector=self.spec.field_selector,
            deadline=LIST_DEADLINE_SECONDS,
        )
        items = body["items"]
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        self.cache.replace(self.spec.kind, self.spec.namespace, items)
        self.last_error = ""
        if self.on_progress is not None and self.resource_version:
            self.on_progress(self.resource_version)
        log(
            logger,
            logging.DEBUG,
            "listed",
            count=len(items),
            rv=self.resource_version,
            **self._fields(),
        )

    async def _watch_until_broken(self) -> None:
        """Watch, resuming after normal ends; return on 410 Gone (caller relists);
        raise on any other failure."""
        while True:
            try:
                async for event in self.api.watch(
                    self.spec.url_path,
                    resource_version=self.resource_version,
                    label_selector=self.spec.label_selector,
                    field_selector=self.spec.field_selector,
                    timeout_seconds=self.watch_timeout_seconds,
                ):
                    self.handle_event(event)
            except ApiError as exc:
                if exc.gone:
                    log(
                        logger,
                        logging.INFO,
                        "watch expired (410 Gone); relisting",
                        **self._fields(),
                    )
                    return
                raise

    def handle_event(self, event: dict[str, Any]) -> None:
        """One decoded watch event; BOOKMARKs only advance the resourceVersion."""
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.cache.apply(self.spec.kind, self.spec.namespace, kind, obj)
        if rv:
            self.resource_version = str(rv)
            if self.on_progress is not None:
                self.on_progress(self.resource_version)
