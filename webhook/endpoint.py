"""The HTTP layer around every admission endpoint, and the one place that counts and
logs what the admission port answers.

It caps the body (413), checks the content type (415), decodes the
AdmissionReview (400 when it is not JSON, or not one, or has no ``request.uid``),
calls the judge and writes the response with the uid echoed. A judge that
raises becomes an errored response that still carries the uid: never a stack
trace to the apiserver, never a crash.

With a :class:`~webhook.callers.CallerPolicy` (``ELB_GATE_CLIENT_AUTH`` verify or
require), each caller is first told apart by its client certificate: the API
server is served as above; any other caller is refused (require, 403), limited
per source address (429) and to a smaller body (413), told decisions
without their reasons, and judged as a dry run (nothing is written for them).

Every request, whatever becomes of it, passes through :func:`admission_endpoint`
once: it is in flight while it is served, and then counted and logged once —
a judged one as its decision (``elb_gate_admission_requests_total``, the duration
histogram, an ``admission`` log line), a rejected one as its code and reason
(``elb_gate_admission_rejected_total``, a ``request rejected`` log line).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from elbgate.logs import log
from webhook.callers import Caller, CallerPolicy, without_reasons
from webhook.decision import Answer, Decision
from webhook.metrics import WebhookMetrics
from webhook.review import (
    STATUS_REASONS,
    AdmissionRequest,
    MalformedReview,
    errored,
)

Judge = Callable[[AdmissionRequest], Awaitable[Answer]]
Endpoint = Callable[[web.Request], Awaitable[web.StreamResponse]]

_log = logging.getLogger("webhook.admission")
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class _Rejected:
    """A request answered with a 4xx before (or instead of) a decision."""

    code: int
    reason: str
    """One of :data:`webhook.metrics.REJECTIONS`."""
    detail: str

    def http(self) -> web.Response:
        return status_response(self.code, self.detail)


@dataclass(frozen=True, slots=True)
class _Judged:
    """A decoded request and its answer (``failure``: the judge raised)."""

    request: AdmissionRequest
    answer: Answer
    seconds: float
    reasons: bool
    failure: BaseException | None = None

    def http(self) -> web.Response:
        response = self.answer.response.complete(self.request.uid)
        if not self.reasons:
            response = without_reasons(response)
        return web.Response(
            body=orjson.dumps(response.to_review()), content_type="application/json"
        )


_Served = _Rejected | _Judged

_CALLER_OUTCOMES = {
    "caller_refused": "refused",
    "caller_limited": "limited",
    "too_large": "too_large",
    "content_type": "malformed",
    "not_json": "malformed",
    "not_admission_review": "malformed",
}
"""How a rejection is counted in ``elb_gate_admission_callers_total``."""


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


def admission_endpoint(
    webhook: str,
    judge: Judge,
    max_bytes: int,
    metrics: WebhookMetrics,
    callers: CallerPolicy | None = None,
) -> Endpoint:
    """An aiohttp POST handler that serves ``judge`` as the AdmissionReview v1 webhook
    ``webhook``, counting and logging every request it answers in ``metrics``."""

    async def endpoint(request: web.Request) -> web.StreamResponse:
        caller = _caller(request, callers) if callers is not None else None
        with metrics.in_flight(webhook):
            served = await _serve(request, judge, max_bytes, caller, callers)
        _record(webhook, request, served, caller, metrics, callers)
        return served.http()

    return endpoint


async def _serve(
    request: web.Request,
    judge: Judge,
    max_bytes: int,
    caller: Caller | None,
    callers: CallerPolicy | None,
) -> _Served:
    if caller is None or callers is None or caller.kind != "unverified":
        return await _judged(request, judge, max_bytes, reasons=True)
    if caller.refused:
        return _Rejected(403, "caller_refused", caller.refused)
    # An unverified caller: within its source's share, a smaller body, no reasons.
    with callers.limit.enter(caller.source) as admitted:
        if not admitted:
            return _Rejected(
                429,
                "caller_limited",
                f"{callers.limit.per_source} requests from {caller.source} are in flight "
                "(ELB_GATE_UNVERIFIED_IN_FLIGHT_PER_SOURCE); callers not verified as the "
                "API server get no more",
            )
        return await _judged(
            request,
            judge,
            min(max_bytes, callers.unverified_max_bytes),
            reasons=False,
            cap_setting="ELB_GATE_UNVERIFIED_MAX_REQUEST_BYTES",
        )


async def _judged(
    request: web.Request,
    judge: Judge,
    max_bytes: int,
    *,
    reasons: bool,
    cap_setting: str = "ELB_GATE_MAX_REQUEST_BYTES",
) -> _Served:
    """Read, decode and judge one AdmissionReview (``reasons=False``: the decision
    without its text, for a caller that is not the API server)."""
    if request.content_type != "application/json":
        return _Rejected(
            415,
            "content_type",
            f"Content-Type must be application/json, got {request.content_type!r}",
        )
    body = await _read_capped(request, max_bytes)
    if body is None:
        return _Rejected(
            413, "too_large", f"AdmissionReview larger than {max_bytes} bytes ({cap_setting})"
        )
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _Rejected(400, "not_json", f"body is not valid JSON: {exc}")
    try:
        admission = AdmissionRequest.from_review(review)
    except MalformedReview as exc:
        return _Rejected(400, "not_admission_review", f"not an AdmissionReview v1 request: {exc}")
    if not reasons:
        # Not the API server: its answer decides no write, so judging it writes nothing
        # either (the admission record is written only for the API server's calls).
        admission = dataclasses.replace(admission, dry_run=True)
    started = time.perf_counter()
    try:
        answer = await judge(admission)
    except Exception as exc:  # the one place that must catch everything
        message = (
            f"elb-gate internal error ({exc.__class__.__name__}) while judging this request; "
            f"refusing; see the webhook log for uid {admission.uid}"
        )
        answer = Answer(errored(500, message), "errored", Decision(False, "internal", message, 500))
        return _Judged(admission, answer, time.perf_counter() - started, reasons, exc)
    return _Judged(admission, answer, time.perf_counter() - started, reasons)


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


def _caller(request: web.Request, callers: CallerPolicy) -> Caller:
    transport = request.transport
    peercert = transport.get_extra_info("peercert") if transport is not None else None
    return callers.identify(peercert, request.remote or "unknown")


def _record(
    webhook: str,
    http: web.Request,
    served: _Served,
    caller: Caller | None,
    metrics: WebhookMetrics,
    callers: CallerPolicy | None,
) -> None:
    """Count and log one answered request (the only place that does)."""
    if callers is not None and caller is not None:
        outcome = _CALLER_OUTCOMES[served.reason] if isinstance(served, _Rejected) else "answered"
        callers.record(caller.kind, outcome)
    who: dict[str, Any] = {}
    if caller is not None:
        who = {"caller": caller.kind, "source": caller.source}
    if isinstance(served, _Rejected):
        metrics.record_rejected(webhook, served.code, served.reason)
        rejected: dict[str, Any] = {
            "webhook": webhook,
            "path": http.path,
            "code": served.code,
            "reason": served.reason,
            "detail": served.detail,
            "remote": http.remote or "",
            **who,
        }
        log(_log, logging.WARNING, "request rejected", **rejected)
        return
    request, answer = served.request, served.answer
    decision = answer.decision
    metrics.record_admission(
        webhook, request.operation, answer.outcome, decision.reason, served.seconds
    )
    fields: dict[str, Any] = {
        "webhook": webhook,
        "uid": request.uid,
        "namespace": request.namespace,
        "name": request.name,
        "operation": request.operation,
        "user": request.user.username,
        "decision": answer.outcome,
        "reason": decision.reason,
        "code": decision.code,
        "duration_ms": round(served.seconds * 1000, 3),
        "dry_run": request.dry_run,
        **who,
    }
    if decision.message:
        fields["message"] = decision.message
    if decision.details:
        fields["details"] = dict(decision.details)
    if served.failure is not None:
        fields["error"] = served.failure.__class__.__name__
        log(_log, logging.ERROR, "admission", exc_info=served.failure, **fields)
    else:
        log(_log, logging.INFO, "admission", **fields)
