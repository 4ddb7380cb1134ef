"""The webhook's own aiohttp application, served in this process over plain HTTP.

For the bad-input properties and the fuzzer: the real ``create_app`` with the real
handlers and a real API client (against the control plane, as the webhook's own
ServiceAccount), so every decision reads the census (from its own Job watch, at a
fence) and the Lease exactly as in production — without a TLS handshake per example.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from elbgate.identities import SubmitterIdentities
from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from testbed.install import CENSUS_FENCE_JOB
from webhook.admission import Admission
from webhook.census_watch import CensusWatch
from webhook.http import Runtime, create_app
from webhook.metrics import WebhookMetrics
from webhook.readiness import ApiReachability
from webhook.tls import ServingCertificate


class InProcessWebhook:
    """``create_app`` on a private event loop thread, bound to 127.0.0.1:0."""

    def __init__(self, kubeconfig: str, env: Mapping[str, str]) -> None:
        self.settings = Settings.from_env({"ELB_GATE_CENSUS_FENCE_JOB": CENSUS_FENCE_JOB, **env})
        self.config = KubeConfig.load(kubeconfig)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="webhook-app", daemon=True
        )
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._api: KubeApi | None = None
        self._census: CensusWatch | None = None
        self._admission: Admission | None = None

    def start(self) -> InProcessWebhook:
        self.thread.start()
        self._submit(self._start()).result(30)
        return self

    def stop(self) -> None:
        self._submit(self._stop()).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def _submit(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def _start(self) -> None:
        self._api = KubeApi(self.config, timeout=self.settings.webhook.api_timeout_seconds)
        await self._api.open()
        metrics = WebhookMetrics(CollectorRegistry(auto_describe=True))
        if self.settings.webhook.census_read == "watch":  # as the server wires it
            self._census = CensusWatch(
                self._api,
                metrics,
                self.settings.webhook.census_fence_job,
                wait_seconds=self.settings.webhook.api_timeout_seconds,
            )
        admission = self._admission = Admission(
            self.settings.gate,
            self.settings.webhook,
            self.settings.rules,
            self._api,
            metrics,
            SubmitterIdentities(),
            census_watch=self._census,
        )
        runtime = Runtime(
            admission,
            ServingCertificate("/nonexistent/tls.crt", "/nonexistent/tls.key"),
            ApiReachability(self._api, self.settings.webhook.api_timeout_seconds),
        )
        self._runner = web.AppRunner(create_app(runtime), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._admission is not None:  # its confirmations of admitted Jobs
            await self._admission.close()
        if self._census is not None:
            await self._census.close()
        if self._api is not None:
            await self._api.close()

    def __enter__(self) -> InProcessWebhook:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
