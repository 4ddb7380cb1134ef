"""An HTTP router in front of the webhook replicas: it picks a replica per admission
review, where the Service (:mod:`testbed.service`) can only pick per connection.

    router = Router(rig.hooks, cas).start()  # https://127.0.0.1:<port>, CA router.ca_pem
    router.pair("blast-1")                   # its next two Job creates: together, one a replica
    router.pin("blast-2", 1)                 # every request of blast-2 to replica 1
    router.stop()

Races need the two halves of a race judged by the two replicas at once, or by one, by
construction. Behind the Service they are judged by whichever replica the API server's
pooled connections lead to: it sends each request on the idle connection it used last,
so when its two most recent connections lead to one replica, every race of a run is
judged by that replica alone. The router terminates TLS (the API server trusts its CA),
reads each review and sends it on over TLS to a replica:

* the next two Job creates of a namespace :meth:`pair` named are held until both have
  come (or ``hold_seconds`` passed), then sent together, one to each replica;
* any other request of a namespace :meth:`pin` named goes to its replica;
* any other request goes to the replicas in turn, as a mesh balancing requests would.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from testbed.service import Replica
from testbed.tls_server import TlsServer


class Router(TlsServer):
    """A TLS-terminating admission review router on 127.0.0.1, served from a thread."""

    def __init__(self, replicas: Sequence[Replica], cas: bytes, hold_seconds: float = 2.0) -> None:
        """``cas``: the CA certificates the replicas' serving certificates chain to (PEM)."""
        super().__init__(ssl.create_default_context(cadata=cas.decode()), "router")
        self.replicas = list(replicas)
        self.hold_seconds = hold_seconds
        self._turn = itertools.count()
        self._pairs: dict[str, list[asyncio.Future[int]]] = {}
        self._pins: dict[str, int] = {}
        self._lock = threading.Lock()

    def pair(self, namespace: str) -> None:
        """Hold the next two Job creates of ``namespace`` until both have come, then
        send them at once, one to each replica."""
        with self._lock:
            self._pairs[namespace] = []

    def pin(self, namespace: str, replica: int | None) -> None:
        """Send every request of ``namespace`` but a pair to ``replica`` (None: in turn)."""
        with self._lock:
            if replica is None:
                self._pins.pop(namespace, None)
            else:
                self._pins[namespace] = replica

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{tail:.*}", self._handle)

    async def _replica(self, review: Mapping[str, Any]) -> int:
        request = review.get("request") or {}
        ns = str(request.get("namespace"))
        job_create = (request.get("kind") or {}).get("kind") == "Job" and (
            request.get("operation") == "CREATE"
        )
        with self._lock:
            waiting = self._pairs.get(ns) if job_create else None
            if waiting is None:
                pinned = self._pins.get(ns)
                return next(self._turn) % len(self.replicas) if pinned is None else pinned
            mine: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            waiting.append(mine)
            if len(waiting) == 2:  # the pair is whole: one to each replica
                del self._pairs[ns]
                for turn, future in enumerate(waiting):
                    future.set_result(turn)
        try:
            return await asyncio.wait_for(asyncio.shield(mine), self.hold_seconds)
        except TimeoutError:  # no partner came in time
            with self._lock:
                if mine.done():  # it came as the hold ended: the pair stands
                    return mine.result()
                if self._pairs.get(ns) == [mine]:
                    del self._pairs[ns]
                return self._pins.get(ns, 0)  # this one goes on alone

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            review = json.loads(body)
        except ValueError:
            review = {}
        replica = self.replicas[await self._replica(review if isinstance(review, dict) else {})]
        assert self._session is not None
        async with self._session.post(
            f"https://127.0.0.1:{replica.port}{request.path_qs}",
            data=body,
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        ) as answer:
            return web.Response(
                status=answer.status,
                body=await answer.read(),
                headers={"Content-Type": answer.headers.get("Content-Type", "application/json")},
            )
