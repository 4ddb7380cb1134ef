"""Several webhook replicas behind one Service, as a cluster runs them.

    with WebhookService(cp, replicas=2, env=env) as service:   # both started, one cert
        service.gate_namespace("blast")
        service.replicas[0].metrics()                            # each replica's /metrics

On a cluster, ``Service elb-system/elb-gate-webhook`` spreads the API server's
connections over the ready webhook pods (kube-proxy: per TCP connection). Here a small
TCP forwarder on 127.0.0.1 plays that part, and the shipped webhook configurations are
registered with the testbed's one transformation (:func:`testbed.webhook_process.point_at`)
aimed at it. The replicas share one serving certificate, as two pods mounting one
Secret do.

The fast tier is enough for what it is used for (two replicas deciding at once, each
connection to one of them): the forwarder spreads connections as kube-proxy does; the
real Service → EndpointSlice → Pod path, gated by readiness, is tests/system/.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.controlplane import ControlPlane
from testbed.install import Installation
from testbed.waiting import wait_until
from testbed.webhook_process import (
    CONFIGURATION_KINDS,
    WebhookProcess,
    await_webhooks_called,
    point_at,
    shipped_configurations,
)

PROBE_NAMESPACE = "elb-gate-probe"


class ServiceProxy:
    """A Service's virtual IP: each TCP connection goes to the next ready endpoint."""

    def __init__(self, endpoints: list[int]) -> None:
        self._endpoints = list(endpoints)
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.connections: dict[int, int] = {port: 0 for port in endpoints}
        """Connections handed to each endpoint (by port)."""
        self._open: set[asyncio.StreamWriter] = set()

    def _pick(self) -> int:
        with self._lock:
            if not self._endpoints:
                raise ConnectionRefusedError("no ready endpoints")
            port = self._endpoints[next(self._next) % len(self._endpoints)]
            self.connections[port] += 1
            return port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._forward(reader, writer)
        except asyncio.CancelledError:
            # The Service is stopping with this connection open. A connection task that
            # ends cancelled makes Python 3.11's StreamReaderProtocol log "Exception in
            # callback ... CancelledError" with a traceback (its done-callback asks the
            # task for its exception); the connection just ends here instead.
            writer.close()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._pick())
        except OSError:
            writer.close()
            return
        self._open.add(writer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                try:
                    dst.close()
                except OSError:
                    pass

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._open.discard(writer)

    def close_connections(self) -> None:
        """Close every open connection (as an endpoint restart would): the API server's
        next calls dial new ones, each to the next endpoint in turn."""
        loop = self._loop
        if loop is None:
            return

        closing: set[asyncio.StreamWriter] = set()
        taken = threading.Event()

        def close() -> None:
            closing.update(self._open)
            taken.set()
            for writer in closing:
                writer.close()

        loop.call_soon_threadsafe(close)
        assert taken.wait(30), "the Service's loop did not run"
        # Only those: the API server may open a new one meanwhile, which stays.
        wait_until(
            lambda: not any(w in self._open for w in closing),
            30,
            "the Service's connections to close",
            0.01,
        )
        # A moment for the API server's HTTP client to read the close on its idle
        # connections; a request it still writes on one fails (counted by the caller).
        time.sleep(0.5)

    def start(self) -> ServiceProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)  # gather() at the end looks it up (no tasks left)
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0)
            )
            self.port = int(self._server.sockets[0].getsockname()[1])
            ready.set()
            loop.run_forever()
            self._server.close()
            # Open connections end with the Service (their pipes closed in order).
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="service-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop = None


class WebhookService:
    """``replicas`` webhook processes behind a :class:`ServiceProxy`, registered once."""

    def __init__(
        self,
        cp: ControlPlane,
        *,
        replicas: int = 2,
        env: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        pods: list[str] | None = None,
    ) -> None:
        self.cp = cp
        self.install = Installation.on(cp)
        names = pods or [f"elb-gate-webhook-{i}" for i in range(replicas)]
        self.replicas = [
            WebhookProcess(
                cp,
                env,
                register=False,
                pod=name,
                workdir=(workdir / name) if workdir else None,
            )
            for name in names
        ]
        for other in self.replicas[1:]:
            other.certificate = self.replicas[0].certificate  # one Secret, mounted twice
        self.proxy: ServiceProxy | None = None
        self._registered: list[tuple[str, str]] = []

    def start(self) -> WebhookService:
        """Start every replica (side by side), the Service, then register."""
        errors: list[BaseException] = []

        def start(hook: WebhookProcess) -> None:
            try:
                hook.start()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(h,)) for h in self.replicas]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            self.stop()
            raise errors[0]
        self.proxy = ServiceProxy([h.port for h in self.replicas]).start()
        self.register()
        return self

    def configurations(self) -> list[dict[str, Any]]:
        """The shipped configurations pointed at the Service."""
        assert self.proxy is not None
        ca_bundle = self.replicas[0].certificate.ca_bundle
        return point_at(shipped_configurations(), self.proxy.port, ca_bundle)

    def register(self) -> None:
        for doc in self.configurations():
            self.cp.admin.apply(doc)
            self._registered.append((CONFIGURATION_KINDS[doc["kind"]], doc["metadata"]["name"]))
        self._wait_effective()

    def _wait_effective(self) -> None:
        # The API server applies new configurations from its informer a moment later:
        # wait until a dry-run Lease write in a probe namespace reaches a replica.
        await_webhooks_called(
            self.install,
            self.replicas,
            60,
            "the API server to call the webhook Service",
            PROBE_NAMESPACE,
        )

    def unregister(self) -> None:
        assert self.proxy is not None or not self._registered
        for resource, name in self._registered:
            current = self.cp.admin.find(resource, None, name)
            if current is None or self.proxy is None:
                continue
            urls = [h["clientConfig"].get("url", "") for h in current.get("webhooks") or []]
            if any(f":{self.proxy.port}/" in u for u in urls):
                self.cp.admin.delete(resource, None, name)
        self._registered.clear()

    def gate_namespace(self, namespace: str) -> str:
        """Create ``namespace`` if needed, with a gated namespace's RoleBindings and label."""
        return self.install.gate(namespace)

    def stop(self) -> None:
        """Unregister, stop the Service and every replica (safe after a partial start)."""
        try:
            self.unregister()
        finally:
            if self.proxy is not None:
                self.proxy.stop()
            for hook in self.replicas:
                hook.stop()

    def __enter__(self) -> WebhookService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
