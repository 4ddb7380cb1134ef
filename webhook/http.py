"""The two aiohttp applications: HTTPS admission, and plain-HTTP metrics/health.

``create_app`` serves the three webhooks (and health, for probes over HTTPS);
``create_ops_app`` serves ``/metrics``, ``/healthz`` and ``/readyz`` on the
separate metrics port. Both read the same :class:`Runtime`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.admission import Admission
from webhook.callers import CallerPolicy
from webhook.cluster_view import ClusterView
from webhook.endpoint import admission_endpoint
from webhook.metrics import LEASE_GUARD, LEASE_STAMP, SEARCH_ADMISSION
from webhook.readiness import ApiReachability
from webhook.readiness_key import ReadinessKey
from webhook.tls import ServingCertificate

JOBS_PATH = "/validate/jobs"
LEASE_MUTATE_PATH = "/mutate/leases"
LEASE_VALIDATE_PATH = "/validate/leases"


@dataclass
class Runtime:
    """What the endpoints share."""

    admission: Admission
    certificate: ServingCertificate
    reachability: ApiReachability
    cluster: ClusterView | None = None
    """The node rules' watch caches (run while the admission app runs)."""
    callers: CallerPolicy | None = None
    """How callers are told apart by their client certificate (``None``: they are not)."""
    readiness_key: ReadinessKey | None = None
    """The Lease that tells submit paths admission is served (renewed while ready)."""


RUNTIME = web.AppKey("runtime", Runtime)
DRAINING = web.AppKey("draining", asyncio.Event)
"""Set when the process is told to stop: every answer from then on closes its connection."""


async def healthz(_request: web.Request) -> web.Response:
    """Alive: the event loop answers."""
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """Ready only when the certificate is loaded and the API answers."""
    runtime = request.app[RUNTIME]
    problems = []
    if not runtime.certificate.loaded:
        problems.append(f"serving certificate not loaded from {runtime.certificate.cert_file}")
    if not await runtime.reachability.reachable():
        problems.append(f"API server unreachable: {runtime.reachability.last_error}")
    if runtime.cluster is not None:
        problems.extend(runtime.cluster.startup_problems())
    if runtime.readiness_key is not None:
        runtime.readiness_key.serving(not problems)
    if problems:
        body = {"ready": False, "problems": problems}
        return web.Response(status=503, body=orjson.dumps(body), content_type="application/json")
    return web.Response(body=orjson.dumps({"ready": True}), content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of the webhook's registry."""
    registry = request.app[RUNTIME].admission.metrics.registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _resources(app: web.Application) -> AsyncIterator[None]:
    """Open the API session, watch the certificate files and run the node rules'
    watch caches while the app runs."""
    runtime = app[RUNTIME]
    await runtime.admission.api.open()
    tasks = [asyncio.create_task(runtime.certificate.watch(), name="certificate-watch")]
    if runtime.cluster is not None:
        tasks.append(asyncio.create_task(runtime.cluster.run(), name="cluster-view"))
    if runtime.readiness_key is not None:
        tasks.append(asyncio.create_task(runtime.readiness_key.run(), name="readiness-key"))
    yield
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await runtime.admission.api.close()


def create_app(runtime: Runtime) -> web.Application:
    """The HTTPS admission application (owns the API session and the certificate watch)."""
    max_bytes = runtime.admission.webhook.max_request_bytes
    app = web.Application(client_max_size=max_bytes + 1)
    app[RUNTIME] = runtime
    app[DRAINING] = asyncio.Event()
    app.on_response_prepare.append(_close_when_draining)
    app.cleanup_ctx.append(_resources)
    admission, callers = runtime.admission, runtime.callers
    for path, webhook, judge in (
        (JOBS_PATH, SEARCH_ADMISSION, admission.validate_job),
        (LEASE_MUTATE_PATH, LEASE_STAMP, admission.mutate_lease),
        (LEASE_VALIDATE_PATH, LEASE_GUARD, admission.validate_lease),
    ):
        endpoint = admission_endpoint(webhook, judge, max_bytes, admission.metrics, callers)
        app.router.add_post(path, endpoint)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def _close_when_draining(request: web.Request, response: web.StreamResponse) -> None:
    """While stopping, answer with ``Connection: close``: the API server keeps using the
    connections it holds open to a terminating Pod, so each one is closed after an answer,
    never under a request."""
    if request.app[DRAINING].is_set():
        response.force_close()  # the server closes it after this answer
        response.headers["Connection"] = "close"  # and the client knows (headers are made)


def create_ops_app(runtime: Runtime) -> web.Application:
    """The plain-HTTP metrics and health application."""
    app = web.Application()
    app[RUNTIME] = runtime
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
