"""The HTTP layer: bad input gets a clear 4xx, counted and logged; a raising handler an
errored response, never a trace."""

from __future__ import annotations

import json
import logging
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from elbgate.serving.logs import JsonFormatter
from tests.builders import review as admission_review
from webhook.decision import Answer, admit, refuse
from webhook.endpoint import admission_endpoint
from webhook.metrics import LEASE_GUARD, SEARCH_ADMISSION, WebhookMetrics
from webhook.review import AdmissionRequest, allowed, denied

MAX = 4096


def review(uid: Any = "5d7d6c1e", **request: Any) -> dict[str, Any]:
    req = {"operation": "CREATE", "namespace": "default", "name": "x", **request}
    if uid is not None:
        req["uid"] = uid
    return admission_review(req)


async def echo_user(request: AdmissionRequest) -> Answer:
    if request.user.username:
        message = f"{request.user.username} may not"
        return Answer(
            denied(403, "Forbidden", message), "denied", refuse(403, "not_holder", message)
        )
    return Answer(allowed(), "allowed", admit())


async def explode(_request: AdmissionRequest) -> Answer:
    raise RuntimeError("secret internals /etc/elb-gate/tls/tls.key")


@pytest.fixture
def metrics() -> WebhookMetrics:
    return WebhookMetrics(CollectorRegistry())


@pytest.fixture
async def client(aiohttp_client: Any, metrics: WebhookMetrics) -> TestClient:
    app = web.Application()
    app.router.add_post("/ok", admission_endpoint(SEARCH_ADMISSION, echo_user, MAX, metrics))
    app.router.add_post("/boom", admission_endpoint(LEASE_GUARD, explode, MAX, metrics))
    return await aiohttp_client(app)


def sample(metrics: WebhookMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def lines(caplog: pytest.LogCaptureFixture, msg: str) -> list[dict[str, Any]]:
    """The JSON lines production writes for the layer's records of ``msg``."""
    return [
        json.loads(JsonFormatter().format(r))
        for r in caplog.records
        if r.name == "webhook.admission" and r.getMessage() == msg
    ]


async def post(
    client: TestClient, path: str, body: bytes | Any, content_type: str = "application/json"
) -> tuple[int, dict[str, Any], str]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    resp = await client.post(path, data=data, headers={"Content-Type": content_type})
    text = await resp.text()
    return resp.status, orjson.loads(text) if text.startswith("{") else {}, text


async def test_a_review_is_answered_with_its_uid_echoed(client: TestClient) -> None:
    status, body, _ = await post(client, "/ok", review())
    assert status == 200
    assert body == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "5d7d6c1e", "allowed": True},
    }


async def test_a_denial_is_http_200_with_allowed_false_and_a_status(client: TestClient) -> None:
    status, body, _ = await post(client, "/ok", review(userInfo={"username": "bob"}))
    assert status == 200
    assert body["response"] == {
        "uid": "5d7d6c1e",
        "allowed": False,
        "status": {
            "code": 403,
            "status": "Failure",
            "reason": "Forbidden",
            "message": "bob may not",
        },
    }


NOT_A_REVIEW = "not_admission_review"


@pytest.mark.parametrize(
    ("body", "content_type", "code", "reason", "says"),
    [
        (b"{not json", "application/json", 400, "not_json", "not valid JSON"),
        (review(uid=None), "application/json", 400, NOT_A_REVIEW, "request.uid is missing"),
        (review(uid=""), "application/json", 400, NOT_A_REVIEW, "request.uid is missing"),
        (review(uid=7), "application/json", 400, NOT_A_REVIEW, "request.uid is missing"),
        (
            {
                "kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1beta1",
                "request": {"uid": "u"},
            },
            "application/json",
            400,
            NOT_A_REVIEW,
            "expected kind AdmissionReview",
        ),
        (
            {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"},
            "application/json",
            400,
            NOT_A_REVIEW,
            "no request object",
        ),
        ([1, 2], "application/json", 400, NOT_A_REVIEW, "not a JSON object"),
        (review(), "text/plain", 415, "content_type", "Content-Type must be application/json"),
        (review(), "application/x-www-form-urlencoded", 415, "content_type", "Content-Type"),
        (
            b"{" + b" " * MAX + b"}",
            "application/json",
            413,
            "too_large",
            "ELB_GATE_MAX_REQUEST_BYTES",
        ),
    ],
    ids=[
        "malformed JSON is a 400",
        "a missing uid is a 400",
        "an empty uid is a 400",
        "a uid that is not a string is a 400",
        "another AdmissionReview version is a 400",
        "a review without request is a 400",
        "a JSON array is a 400",
        "text/plain is a 415",
        "a form is a 415",
        "a body over the cap is a 413",
    ],
)
async def test_bad_input_gets_a_clear_4xx_counted_and_logged_by_its_reason(
    client: TestClient,
    metrics: WebhookMetrics,
    caplog: pytest.LogCaptureFixture,
    body: Any,
    content_type: str,
    code: int,
    reason: str,
    says: str,
) -> None:
    caplog.set_level(logging.WARNING, logger="webhook.admission")
    rejected = {"webhook": SEARCH_ADMISSION, "code": str(code), "reason": reason}
    assert metrics.registry.get_sample_value("elb_gate_admission_rejected_total", rejected) == 0
    status, answer, text = await post(client, "/ok", body, content_type)
    assert status == code
    assert answer["kind"] == "Status" and answer["code"] == code
    assert says in answer["message"]
    assert "Traceback" not in text
    assert sample(metrics, "elb_gate_admission_rejected_total", **rejected) == 1
    [line] = lines(caplog, "request rejected")
    assert (line["level"], line["webhook"], line["path"], line["code"], line["reason"]) == (
        "warning",
        SEARCH_ADMISSION,
        "/ok",
        code,
        reason,
    )
    assert says in line["detail"]
    # Never a decision: nothing is counted as one.
    assert (
        sample(metrics, "elb_gate_admission_duration_seconds_count", webhook=SEARCH_ADMISSION) == 0
    )


async def test_a_chunked_body_over_the_cap_is_a_413(client: TestClient) -> None:
    async def chunks() -> Any:
        for _ in range(4):
            yield b" " * 2048

    resp = await client.post("/ok", data=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status == 413


async def test_a_chunked_review_within_the_cap_is_answered(client: TestClient) -> None:
    body = orjson.dumps(review())

    async def chunks() -> Any:
        for start in range(0, len(body), 16):
            yield body[start : start + 16]

    resp = await client.post("/ok", data=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status == 200
    assert (await resp.json())["response"]["uid"] == "5d7d6c1e"


async def test_a_review_of_exactly_the_cap_is_answered(client: TestClient) -> None:
    body = orjson.dumps(review())
    padded = body[:-1] + b" " * (MAX - len(body)) + b"}"
    assert len(padded) == MAX
    status, answer, _ = await post(client, "/ok", padded)
    assert status == 200 and answer["response"]["allowed"] is True


async def test_a_body_over_the_apps_own_size_limit_is_still_a_status_413(
    aiohttp_client: Any,
) -> None:
    app = web.Application(client_max_size=1024)
    metrics = WebhookMetrics(CollectorRegistry())
    app.router.add_post("/ok", admission_endpoint(SEARCH_ADMISSION, echo_user, MAX, metrics))
    small_cap_client = await aiohttp_client(app)
    body = orjson.dumps(review(padding=" " * 2048))
    status, answer, _ = await post(small_cap_client, "/ok", body)
    assert status == 413 and answer["kind"] == "Status"
    labels = {"webhook": SEARCH_ADMISSION, "code": "413", "reason": "too_large"}
    assert sample(metrics, "elb_gate_admission_rejected_total", **labels) == 1


async def test_a_raising_handler_answers_errored_with_the_uid_and_no_trace(
    client: TestClient, metrics: WebhookMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    status, body, text = await post(client, "/boom", review())
    assert status == 200
    response = body["response"]
    assert response["uid"] == "5d7d6c1e" and response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "RuntimeError" in response["status"]["message"]
    assert "Traceback" not in text and "tls.key" not in text
    # One log line, with the trace for the operator; counted as errored, internal.
    [line] = lines(caplog, "admission")
    assert (line["level"], line["decision"], line["reason"], line["error"]) == (
        "error",
        "errored",
        "internal",
        "RuntimeError",
    )
    assert "tls.key" in line["exc"]
    errored = {"operation": "CREATE", "decision": "errored", "reason": "internal"}
    assert sample(metrics, "elb_gate_admission_requests_total", webhook=LEASE_GUARD, **errored) == 1
    assert sample(metrics, "elb_gate_admission_in_flight", webhook=LEASE_GUARD) == 0


async def test_every_decision_is_counted_timed_and_logged_once(
    client: TestClient, metrics: WebhookMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook.admission")
    await post(client, "/ok", review())
    await post(client, "/ok", review(uid="u-2", userInfo={"username": "bob"}))
    total = "elb_gate_admission_requests_total"
    on = {"webhook": SEARCH_ADMISSION, "operation": "CREATE"}
    assert sample(metrics, total, **on, decision="allowed", reason="ok") == 1
    assert sample(metrics, total, **on, decision="denied", reason="not_holder") == 1
    count = "elb_gate_admission_duration_seconds_count"
    assert sample(metrics, count, webhook=SEARCH_ADMISSION) == 2
    assert sample(metrics, "elb_gate_admission_in_flight", webhook=SEARCH_ADMISSION) == 0
    logged = lines(caplog, "admission")
    assert [(x["uid"], x["decision"], x["reason"], x["user"]) for x in logged] == [
        ("5d7d6c1e", "allowed", "ok", ""),
        ("u-2", "denied", "not_holder", "bob"),
    ]
    assert all(x["duration_ms"] >= 0 and x["namespace"] == "default" for x in logged)


async def test_the_server_keeps_serving_after_a_handler_raised(client: TestClient) -> None:
    await post(client, "/boom", review())
    status, body, _ = await post(client, "/ok", review(uid="next"))
    assert status == 200 and body["response"]["uid"] == "next"


async def test_content_type_with_charset_is_accepted(client: TestClient) -> None:
    status, body, _ = await post(client, "/ok", review(), "application/json; charset=utf-8")
    assert status == 200 and body["response"]["allowed"] is True


async def test_get_is_not_an_admission_method(client: TestClient) -> None:
    resp = await client.get("/ok")
    assert resp.status == 405
