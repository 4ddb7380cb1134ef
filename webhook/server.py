"""Start-up and shutdown of the webhook process: wire the parts, listen, stop cleanly."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from elbgate.identities import SubmitterIdentities
from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.logs import log
from elbgate.serving.credential_metrics import register_credential_failures
from elbgate.settings import Settings
from webhook.admission import Admission
from webhook.callers import CallerPolicy
from webhook.census_watch import CensusWatch
from webhook.cluster_view import ClusterView
from webhook.http import DRAINING, Runtime, create_app, create_ops_app
from webhook.metrics import COMPONENT, WebhookMetrics
from webhook.readiness import ApiReachability
from webhook.readiness_key import ReadinessKey
from webhook.tls import ServingCertificate, secret_fetcher

_log = logging.getLogger("webhook.server")


def process_age() -> float | None:
    """Seconds since this process started (interpreter start, imports and set-up
    included), from ``/proc``; ``None`` where there is none. Logged with ``listening``:
    the webhook's share of a cold start (docs/install.md, "Cold start")."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return round(uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError):
        return None


async def serve(
    settings: Settings,
    identities: SubmitterIdentities,
    kube: KubeConfig,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve admission over HTTPS and metrics over HTTP until ``stop`` is set
    (or SIGTERM/SIGINT), then finish in-flight requests and close."""
    stop = stop or asyncio.Event()
    metrics = WebhookMetrics(CollectorRegistry(auto_describe=True))
    register_credential_failures(metrics.registry, COMPONENT, kube.token)
    api = KubeApi(kube, timeout=settings.webhook.api_timeout_seconds, user_agent="elb-gate-webhook")
    fetch, source = None, settings.webhook.tls_cert_file
    if settings.webhook.tls_secret:
        namespace, name = settings.server.pod_namespace, settings.webhook.tls_secret
        source = f"Secret {namespace}/{name}"
        fetch = secret_fetcher(api, namespace, name)
    certificate = ServingCertificate(
        source,
        settings.webhook.tls_key_file,
        on_loaded=lambda not_after: metrics.record_certificate_expiry(not_after.timestamp()),
        client_auth=settings.webhook.client_auth,
        client_ca_file=settings.webhook.client_ca_file,
        fetch=fetch,
    )
    await certificate.refresh()  # before listening, so the first handshake has it
    reachability = ApiReachability(api, settings.webhook.api_timeout_seconds)
    cluster = ClusterView(api, settings.rules, settings.server.pod_namespace, metrics)
    census_watch = (
        CensusWatch(
            api,
            metrics,
            settings.webhook.census_fence_job,
            wait_seconds=settings.webhook.api_timeout_seconds,
            namespaces=settings.controller.namespaces,
        )
        if settings.webhook.census_read == "watch"
        else None
    )
    if census_watch is not None:
        census_watch.start()
    admission = Admission(
        settings.gate,
        settings.webhook,
        settings.rules,
        api,
        metrics,
        identities,
        on_api_answer=reachability.note_answer,
        on_api_unavailable=reachability.note_unavailable,
        nodes=cluster.seen,
        census_watch=census_watch,
    )
    callers = CallerPolicy.from_settings(
        settings.webhook, metrics.record_caller, metrics.record_unverified_in_flight
    )
    readiness_key = ReadinessKey(
        api, settings.controller.namespaces, settings.server.pod_name or "elb-gate-webhook"
    )
    runtime = Runtime(admission, certificate, reachability, cluster, callers, readiness_key)
    runners = [
        web.AppRunner(create_app(runtime), access_log=None, shutdown_timeout=10.0),
        web.AppRunner(create_ops_app(runtime), access_log=None, shutdown_timeout=2.0),
    ]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        for runner in runners:
            await runner.setup()
        await web.TCPSite(
            runners[0],
            settings.server.bind_address,
            settings.webhook.webhook_port,
            ssl_context=certificate.context,
        ).start()
        await web.TCPSite(
            runners[1], settings.server.bind_address, settings.server.metrics_port
        ).start()
        log(
            _log,
            logging.INFO,
            "listening",
            webhook=[list(a) for a in runners[0].addresses],
            metrics=[list(a) for a in runners[1].addresses],
            enforcement=settings.webhook.enforcement,
            client_auth=settings.webhook.client_auth,
            certificate_loaded=certificate.loaded,
            api=kube.host,
            started_in_seconds=process_age(),
        )
        await stop.wait()
        log(_log, logging.INFO, "stopping")
        await _drain(runners[0])
    finally:
        for runner in runners:  # admission first: it finishes in-flight reviews, then closes
            await runner.cleanup()
        await admission.close()
        if census_watch is not None:
            await census_watch.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


DRAIN_SECONDS = 3.0
"""How long a stopping webhook goes on answering on the connections still open (the
Pod's preStop has already kept it serving while its endpoint was removed)."""


async def _drain(runner: web.AppRunner) -> None:
    """Answer on the open connections, closing each after its answer, until none is left
    or :data:`DRAIN_SECONDS` have passed; then the runner's cleanup closes the rest."""
    runner.app[DRAINING].set()
    deadline = asyncio.get_running_loop().time() + DRAIN_SECONDS
    while runner.server is not None and runner.server.connections:
        if asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(0.05)
