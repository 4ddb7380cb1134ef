"""The HTTP layer: turn an admission handler into an aiohttp endpoint.

It caps the body (413), checks the content type (415), decodes the
AdmissionReview (400 when it is not one or has no ``request.uid``), calls the
handler and writes the response with the uid echoed. A handler that raises
becomes an errored response that still carries the uid: never a stack trace to
the apiserver, never a crash.

With a :class:`~webhook.callers.CallerPolicy` (``ELB_GATE_CLIENT_AUTH`` verify or
require), each caller is first told apart by its client certificate: the API
server is served as above; any other caller is refused (require, 403), limited
per source address (429) and to a smaller body (413), and told decisions
without their reasons. Nothing else happens here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from elbgate.logs import log
from webhook.callers import Caller, CallerPolicy, without_reasons
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


def admission_endpoint(
    handler: Handler, max_bytes: int, callers: CallerPolicy | None = None
) -> Endpoint:
    """An aiohttp POST handler that serves ``handler`` as an AdmissionReview v1 webhook."""

    async def endpoint(request: web.Request) -> web.StreamResponse:
        if callers is None:
            return await _answer(request, handler, max_bytes, reasons=True)
        caller = _caller(request, callers)
        if caller.kind != "unverified":
            response = await _answer(request, handler, max_bytes, reasons=True)
        elif caller.refused:
            response = status_response(403, caller.refused)
        else:
            cap = min(max_bytes, callers.unverified_max_bytes)
            response = await _limited(request, handler, cap, caller, callers)
        callers.record(caller.kind, _OUTCOMES.get(response.status, "answered"))
        return response

    return endpoint


_OUTCOMES = {403: "refused", 429: "limited", 413: "too_large", 400: "malformed", 415: "malformed"}
"""How a non-200 answer is counted in ``elb_gate_admission_callers_total``."""


def _caller(request: web.Request, callers: CallerPolicy) -> Caller:
    transport = request.transport
    peercert = transport.get_extra_info("peercert") if transport is not None else None
    return callers.identify(peercert, request.remote or "unknown")


async def _limited(
    request: web.Request, handler: Handler, max_bytes: int, caller: Caller, callers: CallerPolicy
) -> web.Response:
    """An unverified caller: within its source's share, a smaller body, no reasons."""
    with callers.limit.enter(caller.source) as admitted:
        if not admitted:
            return status_response(
                429,
                f"{callers.limit.per_source} requests from {caller.source} are in flight "
                "(ELB_GATE_UNVERIFIED_IN_FLIGHT_PER_SOURCE); callers not verified as the "
                "API server get no more",
            )
        return await _answer(
            request,
            handler,
            max_bytes,
            reasons=False,
            cap_setting="ELB_GATE_UNVERIFIED_MAX_REQUEST_BYTES",
        )


async def _answer(
    request: web.Request,
    handler: Handler,
    max_bytes: int,
    *,
    reasons: bool,
    cap_setting: str = "ELB_GATE_MAX_REQUEST_BYTES",
) -> web.Response:
    """Read, decode, judge and write one AdmissionReview (``reasons=False``: the
    decision without its text, for a caller that is not the API server)."""
    if request.content_type != "application/json":
        return status_response(
            415, f"Content-Type must be application/json, got {request.content_type!r}"
        )
    body = await _read_capped(request, max_bytes)
    if body is None:
        return status_response(
            413, f"AdmissionReview larger than {max_bytes} bytes ({cap_setting})"
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
    response = response.complete(admission.uid)
    if not reasons:
        response = without_reasons(response)
    return web.Response(body=orjson.dumps(response.to_review()), content_type="application/json")
