"""A gap-aware watch of one resource across the cluster, delivered in order.

The API server sends a watch's events in resourceVersion order; this thread lists once,
then watches from the list's resourceVersion, resuming from the last event it handed
on whenever the server ends the stream. If the server answers 410 Gone (the history it
would resume from was compacted) the continuity is lost: :attr:`Watch.gaps` counts it,
``on_gap`` is told, and the watch starts over from a fresh list, so nobody mistakes an
unwatched stretch for a quiet one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from testbed.api import Api, ApiError, JsonObj

Handler = Callable[[str, JsonObj], None]
"""``(type, object)``: ``ADDED``/``MODIFIED``/``DELETED``, or ``LISTED`` for the first list."""


class Watch:
    """One resource's events, handed to ``on_event`` from a thread of its own."""

    def __init__(
        self,
        api: Api,
        resource: str,
        on_event: Handler,
        on_gap: Callable[[str], None] | None = None,
        *,
        stream_seconds: int = 60,
    ) -> None:
        self.api = api
        self.resource = resource
        self.on_event = on_event
        self.on_gap = on_gap
        self.stream_seconds = stream_seconds
        self.gaps = 0
        self.events = 0
        self.resource_version = ""
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{resource}", daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        if not self.synced.wait(120):
            raise RuntimeError(f"the {self.resource} watch did not list within 120 s")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.stream_seconds + 10)

    def _list(self) -> None:
        body = self.api.request("GET", self.api.resource(self.resource).path())
        for item in body.get("items") or []:
            self.on_event("LISTED", item)
        self.resource_version = str(body["metadata"]["resourceVersion"])
        self.synced.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.resource_version:
                    self._list()
                self._stream()
            except ApiError as exc:
                if exc.status == 410:
                    self._lost(f"410 Gone resuming at {self.resource_version}")
                else:
                    time.sleep(0.5)
            except Exception:  # a dropped connection: resume from the last event
                time.sleep(0.2)

    def _lost(self, why: str) -> None:
        self.gaps += 1
        self.resource_version = ""
        if self.on_gap is not None:
            self.on_gap(f"{self.resource} watch: {why}")

    def _stream(self) -> None:
        path = self.api.resource(self.resource).path()
        query: dict[str, Any] = {
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.stream_seconds,
        }
        for event in self.api.stream(path, query):
            kind = str(event.get("type") or "")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code")
                if code == 410:
                    self._lost(f"410 Gone at {self.resource_version}")
                    return
                raise RuntimeError(f"watch error: {obj}")
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if kind != "BOOKMARK":
                self.events += 1
                self.on_event(kind, obj)
            if rv:
                self.resource_version = rv
            if self._stop.is_set():
                return
