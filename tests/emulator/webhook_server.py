"""A test admission webhook: an aiohttp HTTPS server in a thread, with a trustme certificate."""

from __future__ import annotations

import asyncio
import base64
import ssl
import threading
from collections.abc import Callable
from typing import Any

import trustme
from aiohttp import web

Review = dict[str, Any]
Decide = Callable[[Review], Review]


def allow(**extra: Any) -> Decide:
    """A decision function: allow (plus any response fields, e.g. warnings)."""
    return lambda request: {"allowed": True, **extra}


def deny(message: str, code: int = 403, reason: str = "") -> Decide:
    status: dict[str, Any] = {"code": code, "message": message}
    if reason:
        status["reason"] = reason
    return lambda request: {"allowed": False, "status": status}


def patch(ops: list[dict[str, Any]]) -> Decide:
    import json

    encoded = base64.b64encode(json.dumps(ops).encode()).decode()
    return lambda request: {"allowed": True, "patchType": "JSONPatch", "patch": encoded}


class WebhookServer:
    """Serves AdmissionReview on any path; `decide(request) -> response fields`.

    `requests` records every AdmissionReview request received; `delay` slows each answer.
    """

    def __init__(self, service: tuple[str, str] = ("elb-system", "hook"),
                 decide: Decide | None = None) -> None:
        self.decide = decide or allow()
        self.requests: list[Review] = []
        self.delay = 0.0
        self.echo_wrong_uid = False
        self.ca = trustme.CA()
        self.hostname = f"{service[1]}.{service[0]}.svc"
        self._cert = self.ca.issue_cert(self.hostname, "127.0.0.1")
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()

    async def _handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.requests.append(review["request"])
        if self.delay:
            await asyncio.sleep(self.delay)
        response = {"uid": "wrong" if self.echo_wrong_uid else review["request"]["uid"],
                    **self.decide(review["request"])}
        return web.json_response({"apiVersion": "admission.k8s.io/v1",
                                  "kind": "AdmissionReview", "response": response})

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._cert.configure_cert(ctx)
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx).start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def start(self) -> WebhookServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

