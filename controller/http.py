"""Plain-HTTP endpoints on the metrics port: ``/healthz``, ``/readyz``, ``/liveness``,
``/metrics``. No state of its own: it reads the :class:`Health` it is given."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST


@dataclass(frozen=True)
class Health:
    """What the endpoints read, as callables so they always see the current state."""

    ready: Callable[[], bool]
    """Every gated namespace's cache is synced."""
    liveness: Callable[[], dict[str, object]]
    metrics: Callable[[], bytes]


HEALTH = web.AppKey("health", Health)


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.Response:
    if request.app[HEALTH].ready():
        return web.Response(text="ok")
    return web.Response(status=503, text="caches not synced")


async def _liveness(request: web.Request) -> web.Response:
    return web.json_response(request.app[HEALTH].liveness())


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[HEALTH].metrics()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_app(health: Health) -> web.Application:
    """The metrics/health application."""
    app = web.Application()
    app[HEALTH] = health
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/liveness", _liveness)
    app.router.add_get("/metrics", _metrics)
    return app
