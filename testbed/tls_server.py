"""An aiohttp application served over TLS on 127.0.0.1 from a thread of its own, with a
client session for what it passes on: the fault proxy (:mod:`testbed.faultproxy`) and
the router (:mod:`testbed.router`), usable from synchronous tests.

It serves a certificate for 127.0.0.1 and localhost from a CA of its own
(:attr:`TlsServer.ca_pem`) and verifies what it connects to with ``upstream``.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Self

import aiohttp
import trustme
from aiohttp import web


class TlsServer:
    """Subclasses add their handlers in :meth:`routes`."""

    def __init__(self, upstream: ssl.SSLContext, name: str) -> None:
        ca = trustme.CA(organization_name=f"elb-gate test bed {name}")
        self.ca_pem = ca.cert_pem.bytes()
        self._server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1", "localhost").configure_cert(self._server_ctx)
        self._upstream_ctx = upstream
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        loop = self._loop = asyncio.new_event_loop()

        def serve() -> None:
            loop.run_forever()  # until _stop() is done
            loop.close()

        self._thread = threading.Thread(target=serve, name=self._name, daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), loop).result(30)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and self._thread is not None:
            # The runner's cleanup may wait on streams in flight: stop() waits 30 s at most.
            stopped = asyncio.run_coroutine_threadsafe(self._stop(), loop)
            stopped.add_done_callback(lambda _: loop.call_soon_threadsafe(loop.stop))
            self._thread.join(30)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._upstream_ctx, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._server_ctx)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # port 0: the one the socket got

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
