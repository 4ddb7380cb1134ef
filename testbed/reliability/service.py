"""The webhook's Service: one address in front of several replicas, as kube-proxy gives it.

The webhook configurations name one ``url``; this TCP forwarder listens there and hands
each new connection to the next *ready* replica (round robin), as a ClusterIP Service
does: per connection, TLS passed through untouched, so the API server verifies the
certificate of whichever replica answers (the configurations' ``caBundle`` carries
every replica's CA, as during a CA rotation). A replica leaves the rotation when its
``/readyz`` fails or its process is gone, and :meth:`Service.mark_unready` takes one
out at once (a Pod being deleted leaves its Endpoints first).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence

from testbed.webhook_process import WebhookProcess


def _ready(hook: WebhookProcess) -> bool:
    proc = hook.process
    if proc is None or proc.poll() is not None or not hook.metrics_port:
        return False
    try:
        with urllib.request.urlopen(f"{hook.metrics_url}/readyz", timeout=2.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class Service:
    """A round-robin TCP forwarder on 127.0.0.1, served from a thread of its own."""

    def __init__(self, hooks: Sequence[WebhookProcess], probe_seconds: float = 0.25) -> None:
        self.hooks = list(hooks)
        self.probe_seconds = probe_seconds
        self.ready = [False] * len(self.hooks)
        self.connections = [0] * len(self.hooks)
        """Connections handed to each replica."""
        self.refused = 0
        """Connections closed at once because no replica was ready."""
        self.port = 0
        self._turn = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._prober = threading.Thread(target=self._probe_loop, name="service-probe", daemon=True)

    def start(self) -> Service:
        self.probe_now()
        started = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0, reuse_address=True)
            )
            self.port = int(server.sockets[0].getsockname()[1])
            started.set()
            loop.run_forever()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:  # gather() of nothing looks for this thread's loop, which is not set
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            server.close()
            loop.run_until_complete(server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=serve, name="service", daemon=True)
        self._thread.start()
        started.wait(30)
        self._prober.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._prober.join(10)

    def probe_now(self) -> None:
        """Probe every replica's ``/readyz`` once (the readiness probe)."""
        for i, hook in enumerate(self.hooks):
            self.ready[i] = _ready(hook)

    def mark_unready(self, index: int) -> None:
        self.ready[index] = False

    def all_ready(self) -> bool:
        return all(self.ready)

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.probe_seconds):
            self.probe_now()

    def _pick(self) -> int | None:
        live = [i for i, ok in enumerate(self.ready) if ok and self.hooks[i].port]
        if not live:
            return None
        return live[next(self._turn) % len(live)]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self._pick()
        if index is None:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                "127.0.0.1", self.hooks[index].port
            )
        except OSError:
            self.ready[index] = False
            writer.close()
            return
        self.connections[index] += 1
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:  # the Service stops: drop the connection
            writer.close()
            up_writer.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            sink.close()
