"""The HTTP layer: bad input gets a clear 4xx, a raising handler an errored response, never a trace."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from webhook.endpoint import admission_endpoint
from webhook.review import AdmissionRequest, AdmissionResponse, allowed, denied

MAX = 4096


def review(uid: Any = "5d7d6c1e", **request: Any) -> dict[str, Any]:
    req = {"operation": "CREATE", "namespace": "default", "name": "x", **request}
    if uid is not None:
        req["uid"] = uid
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


async def echo_user(request: AdmissionRequest) -> AdmissionResponse:
    return (
        denied(403, "Forbidden", f"{request.user.username} may not")
        if request.user.username
        else allowed()
    )


async def explode(_request: AdmissionRequest) -> AdmissionResponse:
    raise RuntimeError("secret internals /etc/elb-gate/tls/tls.key")


@pytest.fixture
async def client(aiohttp_client: Any) -> TestClient:
    app = web.Application()
    app.router.add_post("/ok", admission_endpoint(echo_user, MAX))
    app.router.add_post("/boom", admission_endpoint(explode, MAX))
    return await aiohttp_client(app)


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


@pytest.mark.parametrize(
    ("body", "content_type", "code", "says"),
    [
        (b"{not json", "application/json", 400, "not valid JSON"),
        (review(uid=None), "application/json", 400, "request.uid is missing"),
        (review(uid=""), "application/json", 400, "request.uid is missing"),
        (review(uid=7), "application/json", 400, "request.uid is missing"),
        (
            {
                "kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1beta1",
                "request": {"uid": "u"},
            },
            "application/json",
            400,
            "expected kind AdmissionReview",
        ),
        (
            {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"},
            "application/json",
            400,
            "no request object",
        ),
        ([1, 2], "application/json", 400, "not a JSON object"),
        (review(), "text/plain", 415, "Content-Type must be application/json"),
        (review(), "application/x-www-form-urlencoded", 415, "Content-Type"),
        (b"{" + b" " * MAX + b"}", "application/json", 413, "ELB_GATE_MAX_REQUEST_BYTES"),
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
async def test_bad_input_gets_a_clear_4xx(
    client: TestClient, body: Any, content_type: str, code: int, says: str
) -> None:
    status, answer, text = await post(client, "/ok", body, content_type)
    assert status == code
    assert answer["kind"] == "Status" and answer["code"] == code
    assert says in answer["message"]
    assert "Traceback" not in text


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
    app.router.add_post("/ok", admission_endpoint(echo_user, MAX))
    small_cap_client = await aiohttp_client(app)
    body = orjson.dumps(review(padding=" " * 2048))
    status, answer, _ = await post(small_cap_client, "/ok", body)
    assert status == 413 and answer["kind"] == "Status"


async def test_a_raising_handler_answers_errored_with_the_uid_and_no_trace(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    status, body, text = await post(client, "/boom", review())
    assert status == 200
    response = body["response"]
    assert response["uid"] == "5d7d6c1e" and response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "RuntimeError" in response["status"]["message"]
    assert "Traceback" not in text and "tls.key" not in text
    assert any("Traceback" in (r.exc_text or "") or r.exc_info for r in caplog.records)


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
