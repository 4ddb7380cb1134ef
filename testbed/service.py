"""A ClusterIP Service in front of webhook replicas: one address, each connection to a replica.

    service = Service(replicas).start()          # listens on 127.0.0.1:service.port
    ...                                            # point the webhook configurations there
    service.stop()

The webhook configurations name one ``url``; this TCP forwarder listens there and hands
each new connection to the *ready* replica with the fewest connections open, in turn
among equals (kube-proxy's IPVS mode with ``lc``): per connection, TLS passed through
untouched, so the API server verifies the certificate of whichever replica answers.
Plain round robin could leave every connection of the API server's pool on one
replica (an idle connection the replica closed, dialled again on its turn). Which
replica judges a request is still the API server's pick of a pooled connection: a test
that needs a race judged by both replicas, or by one, puts the router in front
(:mod:`testbed.router`).

A replica is anything with a ``port`` (read at each connection: a restarted replica
may listen elsewhere) and a ``ready()`` probe;
:class:`~testbed.webhook_process.WebhookProcess` is one (its process runs and
``/readyz`` answers 200). Every replica is probed every ``probe_seconds``: one whose
probe fails, or whose port refuses a connection, leaves the rotation until a probe
passes again.

Stopping with connections open ends them quietly: a connection task that ended
cancelled makes Python 3.11's asyncio log "Exception in callback ... CancelledError"
with a traceback, which the demo's own check (no traceback on its stderr) fails on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Sequence
from typing import Protocol


class Replica(Protocol):
    """What the Service routes to."""

    @property
    def port(self) -> int:
        """Where it listens now (0: nowhere yet)."""
        ...

    def ready(self) -> bool:
        """Its readiness probe."""
        ...


class Service:
    """A least-connections TCP forwarder on 127.0.0.1 over the ready ``replicas``, served
    from a thread of its own (with a prober thread beside it)."""

    def __init__(self, replicas: Sequence[Replica], probe_seconds: float = 0.25) -> None:
        self.replicas = list(replicas)
        self.probe_seconds = probe_seconds
        self.port = 0
        """Where the Service listens (once started)."""
        self.ready = [False] * len(self.replicas)
        """Which replicas are in the rotation."""
        self.connections = [0] * len(self.replicas)
        """Connections handed to each replica."""
        self.open = [0] * len(self.replicas)
        """Connections open to each replica now."""
        self._turn = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._prober: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Service:
        """Probe every replica, listen, and keep probing."""
        self.probe_now()
        loop = self._loop = asyncio.new_event_loop()  # listening here, served by a thread
        server = loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, reuse_address=True)
        )
        self.port = int(server.sockets[0].getsockname()[1])

        def serve() -> None:
            loop.run_forever()
            server.close()
            # Open connections end with the Service (their pipes closed in order).
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:  # gather() of nothing looks for this thread's loop, which is not set
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=serve, name="service", daemon=True)
        self._thread.start()
        self._prober = threading.Thread(target=self._probe_loop, name="service-probe", daemon=True)
        self._prober.start()
        return self

    def stop(self) -> None:
        """Stop listening and probing; open connections end (safe to call twice)."""
        self._stop.set()
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        if self._prober is not None:
            self._prober.join(10)

    # -- the rotation --------------------------------------------------------------------

    def probe_now(self) -> None:
        """Probe every replica once (the readiness probe)."""
        for i, replica in enumerate(self.replicas):
            self.ready[i] = replica.ready()

    def all_ready(self) -> bool:
        return all(self.ready)

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.probe_seconds):
            self.probe_now()

    def _pick(self) -> int | None:
        live = [i for i, ok in enumerate(self.ready) if ok and self.replicas[i].port]
        if not live:
            return None
        start = next(self._turn)
        n = len(self.replicas)
        index = min(live, key=lambda i: (self.open[i], (i - start) % n))
        self.open[index] += 1  # counted now: a dial racing this one sees it
        return index

    # -- one connection ------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self._pick()
        if index is None:
            writer.close()
            return
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    "127.0.0.1", self.replicas[index].port
                )
            except OSError:
                self.ready[index] = False  # until its next probe
                writer.close()
                return
            self.connections[index] += 1
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                up_writer.close()
        except asyncio.CancelledError:
            # The Service is stopping with this connection open: it just ends here (a
            # task that ended cancelled would make asyncio log a traceback).
            writer.close()
        finally:
            self.open[index] -= 1


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(Exception):
            sink.close()
