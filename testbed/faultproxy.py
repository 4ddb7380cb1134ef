"""A TLS proxy in front of the real API server that injects faults.

    with FaultProxy(cp) as proxy:                       # https://127.0.0.1:PORT
        proxy.add(method="GET", resource="jobs", status=500, count=1)
        proxy.add(resource="leases", delay=3.0)         # slow answers
        proxy.add(resource="jobs", drop=True)           # connection closed, no answer
        proxy.add(resource="jobs", watch_gone=True)     # a watch gets 410 Gone
        proxy.add(resource="jobs", watch=True, lag=1.0) # a watch's events arrive 1 s late
        proxy.add(resource="pods", watch=True, event=e) # a watch opens with event e first
        proxy.add(method="POST", lose_answer=True)      # applied, but the answer is lost
        proxy.add(status=502, body="<html>…</html>")    # a gateway's error page, no Status
        kubeconfig = proxy.kubeconfig(token, "webhook")  # point a component at the proxy

Everything else passes through unchanged, watches streamed. Faults are matched
in order; each fires ``count`` times (``None``: until cleared). The proxy
counts what it forwarded, so a test can tell how many calls a component made.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import ssl
import tempfile
import threading
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from testbed.controlplane import ControlPlane
from testbed.tls_server import TlsServer

_PATH = re.compile(
    r"^/(?:api/v1|apis/[^/]+/[^/]+)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
_HOP_HEADERS = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "host",
    "upgrade",
    "proxy-connection",
    "te",
    "trailer",
}


@dataclass
class Fault:
    """What to do to matching requests. ``None`` fields match anything."""

    method: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    watch: bool | None = None
    status: int | None = None
    """Answer with this HTTP status and a Kubernetes ``Status`` body."""
    delay: float = 0.0
    """Seconds to wait before acting (or before forwarding, when nothing else is set)."""
    drop: bool = False
    """Close the connection without an answer."""
    watch_gone: bool = False
    """Answer a watch with an ERROR event carrying 410 Gone (resourceVersion too old)."""
    lose_answer: bool = False
    """Forward the request (the API server applies it), then close the connection
    without the answer: a write whose outcome the client cannot know."""
    body: str | None = None
    """With ``status``: answer this text instead of a ``Status`` (a load balancer's page)."""
    lag: float = 0.0
    """A watch: each event is passed on this many seconds after the API server sent it,
    in order (a watch cache behind the API server)."""
    event: dict[str, Any] | None = None
    """A watch: this event comes first, before the API server's (a stale or reordered
    stream: it need not be true)."""
    count: int | None = 1
    fired: int = field(default=0)

    def matches(self, method: str, info: Mapping[str, Any]) -> bool:
        if self.count is not None and self.fired >= self.count:
            return False
        checks = (
            (self.method, method),
            (self.resource, info.get("resource")),
            (self.namespace, info.get("ns")),
            (self.name, info.get("name")),
            (self.watch, info.get("watch")),
        )
        return all(want is None or want == got for want, got in checks)


class FaultProxy(TlsServer):
    """The proxy, served from a thread of its own (usable from sync tests)."""

    def __init__(self, control_plane: ControlPlane) -> None:
        super().__init__(ssl.create_default_context(cafile=control_plane.ca_file), "fault-proxy")
        self.cp = control_plane
        self.faults: list[Fault] = []
        self.forwarded: Counter[tuple[str, str]] = Counter()
        self.requests: list[tuple[str, str]] = []
        """Every request received, faulted or not: (method, path with its query)."""
        self.answered: list[tuple[str, str, int]] = []
        """Every forwarded answer, once sent whole: (method, path with its query, bytes of
        its body as the API server sent them)."""
        self.watching: Counter[str] = Counter()
        """The watches open now: how many streams of each path with its query."""
        self._ending = asyncio.Event()
        self._lock = threading.Lock()
        self._dir = Path(tempfile.mkdtemp(prefix="elb-gate-proxy-"))
        self.ca_file = str(self._dir / "proxy-ca.pem")
        Path(self.ca_file).write_bytes(self.ca_pem)

    # -- faults -------------------------------------------------------------------------

    def add(self, **kwargs: Any) -> Fault:
        fault = Fault(**kwargs)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self, namespace: str | None = None) -> None:
        """Drop every fault, or only those scoped to ``namespace``."""
        with self._lock:
            self.faults[:] = [f for f in self.faults if namespace not in (None, f.namespace)]

    def _take(self, method: str, info: Mapping[str, Any]) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, info):
                    fault.fired += 1
                    return fault
        return None

    # -- wiring -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving, and remove the CA and the kubeconfigs it wrote."""
        super().stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def kubeconfig(self, token: str, name: str) -> str:
        """A kubeconfig that reaches the API server through this proxy."""
        path = self._dir / f"{name}.kubeconfig"
        return self.cp.write_kubeconfig(path, name, token, server=self.url, ca_file=self.ca_file)

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._handle)

    # -- the proxy ----------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        match = _PATH.match(request.path)
        info: dict[str, Any] = dict(match.groupdict()) if match else {}
        info["watch"] = request.query.get("watch") in ("1", "true")
        with self._lock:
            self.requests.append((request.method, request.path_qs))
            self.watching[request.path_qs] += info["watch"]
        try:
            return await self._serve(request, info)
        finally:  # the stream ended, or its client went away (the handler is cancelled)
            with self._lock:
                self.watching[request.path_qs] -= info["watch"]

    async def _serve(self, request: web.Request, info: Mapping[str, Any]) -> web.StreamResponse:
        fault = self._take(request.method, info)
        if fault is not None:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.drop:
                if request.transport is not None:
                    request.transport.close()
                raise asyncio.CancelledError  # nothing more to send
            if fault.status is not None and fault.body is not None:
                return web.Response(status=fault.status, text=fault.body, content_type="text/html")
            if fault.status is not None:
                failure = _failure(fault.status, f"injected fault: {fault.status}")
                return web.json_response(failure, status=fault.status)
            if fault.watch_gone and info["watch"]:
                why = "too old resource version: injected"
                event = {"type": "ERROR", "object": _failure(410, why)}
                return web.Response(text=json.dumps(event) + "\n", content_type="application/json")
            if fault.lose_answer:
                await self._forward(request, info, deliver=False)
            if (fault.lag or fault.event) and info["watch"]:
                return await self._forward(request, info, lag=fault.lag, first=fault.event)
        return await self._forward(request, info)

    async def _forward(
        self,
        request: web.Request,
        info: Mapping[str, Any],
        *,
        deliver: bool = True,
        lag: float = 0.0,
        first: Mapping[str, Any] | None = None,
    ) -> web.StreamResponse:
        assert self._session is not None
        with self._lock:
            self.forwarded[(request.method, str(info.get("resource") or request.path))] += 1
        # aiohttp hands the body over decoded: its encoding is not passed on (an answer's is,
        # as the API server sent it).
        skip = {*_HOP_HEADERS, "content-encoding"}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
        body = await request.read()
        url = self.cp.server + request.path_qs
        async with self._session.request(
            request.method, url, headers=headers, data=body or None
        ) as upstream:
            if not deliver:
                await upstream.read()  # the API server has answered: the write is done
                if request.transport is not None:
                    request.transport.close()
                raise asyncio.CancelledError  # the answer never reaches the client
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_HEADERS:
                    response.headers[key] = value
            await response.prepare(request)
            if first is not None:
                await response.write(json.dumps(first).encode() + b"\n")
            sent = 0
            ending = self._ending
            chunks = (_late(upstream, lag) if lag else upstream.content.iter_any()).__aiter__()
            while True:
                step = asyncio.ensure_future(chunks.__anext__())
                # Retrieved even when the handler is cancelled before awaiting it.
                step.add_done_callback(lambda t: t.cancelled() or t.exception())
                if info.get("watch"):
                    stop = asyncio.ensure_future(ending.wait())
                    try:
                        await asyncio.wait((step, stop), return_when=asyncio.FIRST_COMPLETED)
                    finally:  # the client may go away meanwhile: leave no task behind
                        stop.cancel()
                        if not step.done():
                            step.cancel()
                    if step.cancelled():  # end_watches(): the stream ends as a timeout would
                        break
                try:
                    chunk = await step
                except StopAsyncIteration:
                    break
                sent += len(chunk)
                await response.write(chunk)
            await response.write_eof()
            with self._lock:
                self.answered.append((request.method, request.path_qs, sent))
            return response

    def end_watches(self) -> None:
        """End every watch stream in flight cleanly, as the API server does when a watch
        times out: each client resumes from its last resourceVersion (a ``watch_gone``
        fault then answers that resume with 410)."""
        loop = self._loop
        assert loop is not None

        def swap() -> None:
            old, self._ending = self._ending, asyncio.Event()
            old.set()

        loop.call_soon_threadsafe(swap)


_REASONS = {
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
    429: "TooManyRequests",
    409: "Conflict",
    410: "Expired",
}


def _failure(code: int, message: str) -> dict[str, Any]:
    """A Kubernetes ``Status`` of a failed call."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(code, "InternalError"),
        "code": code,
    }


async def _late(upstream: aiohttp.ClientResponse, lag: float) -> AsyncIterator[bytes]:
    """A watch's chunks, each ``lag`` seconds after it arrived, in order (the API server's
    stream read on meanwhile)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

    async def read() -> None:
        try:
            async for chunk in upstream.content.iter_any():
                await queue.put((loop.time() + lag, chunk))
        finally:
            await queue.put(None)

    reader = asyncio.ensure_future(read())
    try:
        while (item := await queue.get()) is not None:
            due, chunk = item
            await asyncio.sleep(max(0.0, due - loop.time()))
            yield chunk
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
