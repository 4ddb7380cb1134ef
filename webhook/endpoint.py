"""The HTTP layer: turn an admission handler into an aiohttp endpoint.

It caps the body (413), checks the content type (415), decodes the
AdmissionReview (400 when it is not one or has no ``request.uid``), calls the
handler and writes the response with the uid echoed. A handler that raises
becomes an errored response that still carries the uid: never a stack trace to
the apiserver, never a crash. Nothing else happens here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from elbgate.logs import log
from webhook.review import (
    STATUS_REASONS,
    AdmissionRequest,
    AdmissionResponse,
    MalformedReview,
    errored,
)

Handler = Callable[[AdmissionRequest], Awaitable[AdmissionResponse]]
Endpoint = Callable[[web.Request], Awaitable[web.StreamResponse]]

_log = logging.getLogger("webhook.endpoint")
_CHUNK = 64 * 1024


def status_response(code: int, message: str) -> web.Response:
    """A non-200 answer with a ``Status`` body that says what was wrong."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": STATUS_REASONS.get(code, ""),
        "code": code,
    }
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


async def _read_capped(request: web.Request, max_bytes: int) -> bytes | None:
    """The body, or ``None`` once it exceeds ``max_bytes`` (also when chunked)."""
    length = request.content_length
    if length is not None:
        if length > max_bytes:
            return None
        # Framed by Content-Length (what the apiserver sends): one read, no chunk loop.
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:  # an app whose client_max_size is lower
            return None
    parts: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            return None
        parts.append(chunk)
    return b"".join(parts)


def admission_endpoint(handler: Handler, max_bytes: int) -> Endpoint:
    """An aiohttp POST handler that serves ``handler`` as an AdmissionReview v1 webhook."""

    async def endpoint(request: web.Request) -> web.StreamResponse:
        if request.content_type != "application/json":
            return status_response(
                415, f"Content-Type must be application/json, got {request.content_type!r}"
            )
        body = await _read_capped(request, max_bytes)
        if body is None:
            return status_response(
                413,
                f"AdmissionReview larger than {max_bytes} bytes (ELB_GATE_MAX_REQUEST_BYTES)",
            )
        try:
            review = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return status_response(400, f"body is not valid JSON: {exc}")
        try:
            admission = AdmissionRequest.from_review(review)
        except MalformedReview as exc:
            return status_response(400, f"not an AdmissionReview v1 request: {exc}")
        try:
            response = await handler(admission)
        except Exception as exc:  # the one place that must catch everything
            log(
                _log,
                logging.ERROR,
                "handler raised; answering errored",
                exc_info=True,
                uid=admission.uid,
                path=request.path,
                error=exc.__class__.__name__,
            )
            response = errored(
                500,
                f"elb-gate internal error ({exc.__class__.__name__}) while judging this request; "
                f"refusing; see the webhook log for uid {admission.uid}",
            )
        return web.Response(
            body=orjson.dumps(response.complete(admission.uid).to_review()),
            content_type="application/json",
        )

    return endpoint
