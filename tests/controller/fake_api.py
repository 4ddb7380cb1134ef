"""A recording stand-in for the few API-server endpoints the holder watches use.

Not a cluster: it serves LIST and WATCH of pods and nodes filtered by
``fieldSelector=metadata.name=<name>`` (as the apiserver does), GET of one pod, and accepts
the controller's writes (Lease/ConfigMap PATCH, ConfigMap and Event POST). Every request is
recorded, so tests can assert *what* the controller asked for: the watch scope.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

Obj = dict[str, Any]


@dataclass(frozen=True)
class Seen:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, str]

    @property
    def watch(self) -> bool:
        return self.query.get("watch") == "true"


@dataclass
class _Watcher:
    resource: str
    namespace: str
    name: str | None
    queue: asyncio.Queue[Obj | None] = field(default_factory=asyncio.Queue)


class FakeApi:
    """Serve on 127.0.0.1, port 0; ``host`` once started."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.objects: dict[tuple[str, str, str], Obj] = {}
        """(resource, namespace, name) → object; nodes have namespace ``""``."""
        self.patches: list[tuple[str, Obj]] = []
        self.failing_gets = 0
        """Answer this many GETs of one object with a 503 first (an API outage)."""
        self._watchers: list[_Watcher] = []
        self._history: list[tuple[int, str, Obj]] = []
        """(resourceVersion, resource, event) of every event sent, for a watch that
        starts from an older resourceVersion (as the apiserver replays them)."""
        self._rv = 100
        self._runner: web.AppRunner | None = None
        self.host = ""

    # -- test side -----------------------------------------------------------------

    def put(self, resource: str, obj: Obj, event: str = "MODIFIED") -> None:
        """Store ``obj`` and send ``event`` to every watch it matches."""
        meta = obj.setdefault("metadata", {})
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        key = (resource, str(meta.get("namespace") or ""), str(meta["name"]))
        if event == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.emit(resource, obj, event)

    def emit(self, resource: str, obj: Obj, event: str) -> None:
        """Send ``event`` to the watches ``obj`` matches, without storing it (a watch that
        runs ahead of, or behind, what a GET reads)."""
        sent = {"type": event, "object": obj}
        self._history.append(
            (int(obj["metadata"].get("resourceVersion") or self._rv), resource, sent)
        )
        for w in self._watchers:
            if _matches(w, resource, obj):
                w.queue.put_nowait(sent)

    def open_watches(self, resource: str) -> list[tuple[str, str | None]]:
        """(namespace, name) of the watches of ``resource`` open now."""
        return [(w.namespace, w.name) for w in self._watchers if w.resource == resource]

    def of(self, resource_path_part: str) -> list[Seen]:
        return [r for r in self.requests if f"/{resource_path_part}" in r.path]

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[FakeApi]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Cancel a watch handler when its client goes away, so open_watches() is exact.
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.host = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        try:
            yield self
        finally:
            for w in self._watchers:
                w.queue.put_nowait(None)
            await self._runner.cleanup()

    # -- server side ---------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        seen = Seen(request.method, request.path, dict(request.query))
        self.requests.append(seen)
        parts = request.path.strip("/").split("/")
        # /api/v1/namespaces/<ns>/<resource>[/<name>] or /api/v1/<resource>[/<name>]
        # or /apis/<group>/<version>/namespaces/<ns>/<resource>[/<name>]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        namespace = ""
        if rest and rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource, name = rest[0], (rest[1] if len(rest) > 1 else None)
        if request.method == "GET" and name is None:
            wanted = _name_selected(request.query.get("fieldSelector", ""))
            if seen.watch:
                return await self._watch(request, resource, namespace, wanted)
            items = [
                o
                for (r, ns, n), o in self.objects.items()
                if r == resource and ns == namespace and wanted in (None, n)
            ]
            return _json(
                {"kind": "List", "metadata": {"resourceVersion": str(self._rv)}, "items": items}
            )
        if request.method == "GET" and self.failing_gets > 0:
            self.failing_gets -= 1
            return _json({"kind": "Status", "code": 503, "reason": "ServiceUnavailable"}, 503)
        if request.method == "GET":
            obj = self.objects.get((resource, namespace, str(name)))
            if obj is None:
                return _json(
                    {
                        "kind": "Status",
                        "code": 404,
                        "reason": "NotFound",
                        "message": f"{resource} {name!r} not found",
                    },
                    404,
                )
            return _json(obj)
        body = orjson.loads(await request.read() or b"{}")
        if request.method == "PATCH":
            self.patches.append((request.path, body))
            current = dict(self.objects.get((resource, namespace, str(name)), {}))
            current.setdefault("metadata", {"name": name, "namespace": namespace})
            self._rv += 1
            current["metadata"] = {**current["metadata"], "resourceVersion": str(self._rv)}
            return _json(current)
        if request.method == "POST":
            self._rv += 1
            body.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
            return _json(body, 201)
        return _json({"kind": "Status", "code": 405, "reason": "MethodNotAllowed"}, 405)

    async def _watch(
        self, request: web.Request, resource: str, namespace: str, name: str | None
    ) -> web.StreamResponse:
        watcher = _Watcher(resource, namespace, name)
        # What happened since the LIST the watch resumes from comes first (no event
        # falls between a LIST and its WATCH); registered in the same step, so nothing
        # is sent twice or lost.
        since = int(request.query.get("resourceVersion") or 0)
        for rv, kind, sent in self._history:
            if rv > since and _matches(watcher, kind, sent["object"]):
                watcher.queue.put_nowait(sent)
        self._watchers.append(watcher)
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        try:
            while (event := await watcher.queue.get()) is not None:
                await resp.write(orjson.dumps(event) + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.remove(watcher)
        return resp


def _matches(w: _Watcher, resource: str, obj: Obj) -> bool:
    meta = obj["metadata"]
    return (
        w.resource == resource
        and w.namespace == str(meta.get("namespace") or "")
        and w.name in (None, str(meta["name"]))
    )


def _name_selected(selector: str) -> str | None:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.name":
            return value
    return None


def _json(obj: Obj, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")
