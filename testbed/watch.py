"""LIST + WATCH of one resource in a thread, events handed over in the API server's order.

    watch = Watch(cp.admin, "jobs", on_event, namespace=ns).start()  # returns once listed
    ...
    watch.stop()

``on_event(type, obj)`` gets each ``ADDED``/``MODIFIED``/``DELETED`` of the resource in
commit order: in one ``namespace`` or (without one) the whole cluster, optionally narrowed
by ``label_selector``/``field_selector``. A stream the server ends (every
``stream_seconds``) is resumed from the last resourceVersion seen, bookmarks included:
nothing is listed again, nothing is handed over twice.

What a LIST hands over depends on whether the consumer passes ``on_gap``:

* without it, the consumer keeps a *picture* that converges on the server's: the first
  LIST arrives as ``ADDED``; after a 410 Gone (the history the watch would resume from
  was compacted) it lists again and hands over the difference only: ``DELETED`` for
  what went, ``ADDED``/``MODIFIED`` for what came or changed;
* with it, the consumer follows the *history*, and must not take an unwatched stretch
  for a quiet one: a LIST arrives as ``LISTED`` (state found, not writes seen), and a
  410 is a lost continuity: :attr:`Watch.gaps` counts it, ``on_gap(why)`` is told, and
  the watch starts over from a fresh LIST, handed over as ``LISTED`` again.

Other failures (a dropped connection, an error answer) are kept in :attr:`Watch.errors`
and retried after a pause from where the watch was; an exception raised by a callback
is kept there too, and the watch goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from testbed.api import Api, ApiError, JsonObj

CHANGES = ("ADDED", "MODIFIED", "DELETED")


class Watch:
    """One resource's events, handed to ``on_event`` from a thread of its own."""

    def __init__(
        self,
        api: Api,
        resource: str,
        on_event: Callable[[str, JsonObj], None],
        on_gap: Callable[[str], None] | None = None,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        stream_seconds: int = 60,
    ) -> None:
        self.api = api
        self.on_event = on_event
        self.on_gap = on_gap
        self.stream_seconds = stream_seconds
        self.what = f"{resource} in {namespace}" if namespace else resource
        self.gaps = 0
        """410s seen: each lost the continuity (with ``on_gap``, each was reported)."""
        self.errors: list[BaseException] = []
        self.resource_version = ""
        """Where the watch resumes: the last revision handed over ("" until listed)."""
        self._path = api.resource(resource).path(namespace)
        self._selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
        self._known: dict[tuple[str, str], JsonObj] = {}
        """The objects as last handed over (what a picture's relist is compared with)."""
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._calling = threading.RLock()
        self._thread = threading.Thread(target=self._run, name=f"watch {self.what}", daemon=True)

    def start(self) -> Watch:
        """Start the thread; return once the first LIST was handed over."""
        self._thread.start()
        if not self._synced.wait(120):
            self.stop()
            raise TimeoutError(f"the {self.what} watch did not list within 120 s: {self.errors}")
        return self

    def stop(self) -> None:
        """Stop at once: once this returns, no callback runs again (the thread itself ends
        with its current stream)."""
        self._stop.set()
        with self._calling:  # a callback under way finishes first
            pass

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        with self._calling:
            if self._stop.is_set():
                return
            try:
                callback(*args)
            except Exception as exc:  # a consumer's bug is kept, the watch goes on
                self.errors.append(exc)

    def _deliver(self, kind: str, obj: JsonObj) -> None:
        key = _key(obj)
        if kind == "DELETED":
            self._known.pop(key, None)
        else:
            self._known[key] = obj
        self._call(self.on_event, kind, obj)

    def _list(self) -> None:
        body = self.api.request("GET", self._path, query=self._selectors)
        items = body.get("items") or []
        if self.on_gap is not None:  # a history: what the list found, as found
            for item in items:
                self._deliver("LISTED", item)
        else:  # a picture: what changed since the last one (the first time, everything)
            found = {_key(item): item for item in items}
            for key, old in list(self._known.items()):
                if key not in found:
                    self._deliver("DELETED", old)
            for key, obj in found.items():
                before = self._known.get(key)
                if before is None:
                    self._deliver("ADDED", obj)
                elif _rv(before) != _rv(obj):
                    self._deliver("MODIFIED", obj)
        self.resource_version = str(body["metadata"]["resourceVersion"])
        self._synced.set()

    def _stream(self) -> None:
        query = {
            **self._selectors,
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.stream_seconds,
        }
        for event in self.api.stream(self._path, {k: v for k, v in query.items() if v}):
            if self._stop.is_set():
                return
            kind, obj = str(event.get("type") or ""), event.get("object") or {}
            if kind == "ERROR":  # a 410 Gone too: _run takes it as it takes a 410 answer
                raise ApiError(int(obj.get("code") or 500), obj, "WATCH", self._path)
            if kind in CHANGES:
                self._deliver(kind, obj)
            self.resource_version = _rv(obj) or self.resource_version

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.resource_version:
                    self._list()
                self._stream()
            except Exception as exc:  # an error answer, a dropped stream, urllib3's own errors
                if isinstance(exc, ApiError) and exc.status == 410:  # lost continuity: list again
                    self.gaps += 1
                    why = f"{self.what} watch: 410 Gone resuming at {self.resource_version}"
                    self.resource_version = ""
                    if self.on_gap is not None:
                        self._call(self.on_gap, why)
                elif not self._stop.is_set():
                    self.errors.append(exc)
                    self._stop.wait(0.5)


def _key(obj: JsonObj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rv(obj: JsonObj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
