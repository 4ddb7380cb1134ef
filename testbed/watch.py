"""LIST + WATCH of one resource in a thread, events handed over in the API server's order.

    watch = ResourceWatch(cp.admin, "jobs", ns, on_event).start()
    ...
    watch.stop()

``on_event(type, obj)`` gets ``ADDED`` for every object the first LIST returns, then
each ``ADDED``/``MODIFIED``/``DELETED`` of the watch, in commit order for that
resource. A watch the server ends is resumed from the last resourceVersion seen; a
410 Gone (history compacted) lists again and reports the difference, so a consumer's
picture of the objects always converges on the server's. It runs until
:meth:`stop` (within one ``timeoutSeconds`` of the server's watch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from testbed.api import Api, ApiError, JsonObj

EventHandler = Callable[[str, JsonObj], None]
WATCH_TIMEOUT_SECONDS = 20
"""The server ends each watch after this long; the thread then resumes it (and may stop)."""


class ResourceWatch:
    """One resource (optionally selected) in one namespace, watched from a thread."""

    def __init__(
        self,
        api: Api,
        resource: str,
        namespace: str | None,
        on_event: EventHandler,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.on_event = on_event
        self.selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
        self.errors: list[BaseException] = []
        self.synced = threading.Event()
        """Set once the first LIST was handed over."""
        self._known: dict[str, JsonObj] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{resource}-{namespace}", daemon=True
        )

    def start(self) -> ResourceWatch:
        self._thread.start()
        return self

    def stop(self, timeout: float = 0.0) -> None:
        """Stop handing over events at once; the thread ends with the current watch."""
        self._stop.set()
        if timeout and self._thread.is_alive():
            self._thread.join(timeout)

    def _path(self) -> str:
        return self.api.resource(self.resource).path(self.namespace)

    def _query(self) -> dict[str, Any]:
        return {k: v for k, v in self.selectors.items() if v}

    def _relist(self) -> str:
        """LIST; report what appeared, changed or went away since the last picture."""
        body = self.api.request("GET", self._path(), query=self._query())
        seen: dict[str, JsonObj] = {}
        for item in body.get("items") or []:
            seen[item["metadata"]["name"]] = item
        for name, old in list(self._known.items()):
            if name not in seen:
                self._deliver("DELETED", old)
        for name, obj in seen.items():
            before = self._known.get(name)
            version = obj["metadata"].get("resourceVersion")
            if before is None:
                self._deliver("ADDED", obj)
            elif before["metadata"].get("resourceVersion") != version:
                self._deliver("MODIFIED", obj)
        self.synced.set()
        return str(body["metadata"]["resourceVersion"])

    def _deliver(self, kind: str, obj: JsonObj) -> None:
        if self._stop.is_set():
            return
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self._known.pop(name, None)
        else:
            self._known[name] = obj
        try:
            self.on_event(kind, obj)
        except Exception as exc:  # a consumer's bug is reported, the watch goes on
            self.errors.append(exc)

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                query = {
                    **self._query(),
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
                }
                for event in self.api.stream(self._path(), query):
                    if self._stop.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        # 410 Gone: the history we resume from was compacted.
                        version = None
                        break
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._deliver(str(kind), obj)
            except (ApiError, OSError, ValueError) as exc:
                if self._stop.is_set():
                    return
                self.errors.append(exc)
                if isinstance(exc, ApiError) and exc.status == 410:
                    version = None
                time.sleep(0.5)
            except Exception as exc:  # urllib3's own errors: retry like a dropped stream
                if self._stop.is_set():
                    return
                self.errors.append(exc)
                time.sleep(0.5)
