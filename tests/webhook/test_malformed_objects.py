"""A review whose ``request.object`` or ``oldObject`` is not a JSON object, or whose
``metadata``, ``spec`` or ``status`` is not, is malformed: an HTTP 400 naming the field and
echoing the uid, and the handler is never asked. Before, a JSON string there was read as
"no object" — and a Job "without an object" was admitted."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from tests.builders import review as admission_review
from webhook.decision import Answer, admit
from webhook.endpoint import admission_endpoint
from webhook.metrics import SEARCH_ADMISSION, WebhookMetrics
from webhook.review import AdmissionRequest, MalformedReview, allowed

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "elb-finalizer-1c0d5bcc", "labels": {"app": "finalizer"}},
}
NOT_OBJECTS = [
    (orjson.dumps(JOB).decode(), "a string"),  # the object, serialised once too often
    ("", "a string"),
    ([JOB], "an array"),
    (7, "a number"),
    (1.5, "a number"),
    (True, "a boolean"),
]


def review(operation: str = "UPDATE", **request: Any) -> dict[str, Any]:
    req = {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": operation, **request}
    return admission_review(req)


@pytest.fixture
def asked() -> list[AdmissionRequest]:
    return []


@pytest.fixture
async def client(aiohttp_client: Any, asked: list[AdmissionRequest]) -> TestClient:
    async def handler(request: AdmissionRequest) -> Answer:
        asked.append(request)
        return Answer(allowed(), "allowed", admit())

    app = web.Application()
    metrics = WebhookMetrics(CollectorRegistry())
    app.router.add_post(
        "/validate/jobs", admission_endpoint(SEARCH_ADMISSION, handler, 1 << 20, metrics)
    )
    return await aiohttp_client(app)


@pytest.mark.parametrize("field", ["object", "oldObject"])
@pytest.mark.parametrize(("value", "kind"), NOT_OBJECTS, ids=[k for _v, k in NOT_OBJECTS])
async def test_a_field_that_is_not_an_object_is_a_400_naming_it_with_the_uid(
    client: TestClient, asked: list[AdmissionRequest], field: str, value: Any, kind: str
) -> None:
    fields = {"object": JOB, "oldObject": JOB, field: value}
    resp = await client.post(
        "/validate/jobs",
        data=orjson.dumps(review(**fields)),
        headers={"Content-Type": "application/json"},
    )
    status = await resp.json()
    assert resp.status == 400
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 400, "BadRequest")
    assert f"request.{field} must be a JSON object or null, got {kind}" in status["message"]
    assert "705ab4f5-6393-11e8-b7cc-42010a800002" in status["message"]
    assert asked == []  # never judged, so never admitted


@pytest.mark.parametrize("field", ["object", "oldObject"])
@pytest.mark.parametrize("section", ["metadata", "spec", "status"])
@pytest.mark.parametrize(("value", "kind"), NOT_OBJECTS[1:], ids=[k for _v, k in NOT_OBJECTS[1:]])
async def test_an_objects_section_that_is_not_an_object_is_a_400_naming_it(
    client: TestClient,
    asked: list[AdmissionRequest],
    field: str,
    section: str,
    value: Any,
    kind: str,
) -> None:
    """Before, a Job whose ``spec`` was a string reached the decision, which raised: an
    "internal error" refusal (and a traceback in the log) instead of a clear 400."""
    fields: dict[str, Any] = {"object": JOB, "oldObject": JOB, field: {**JOB, section: value}}
    resp = await client.post(
        "/validate/jobs",
        data=orjson.dumps(review(**fields)),
        headers={"Content-Type": "application/json"},
    )
    status = await resp.json()
    assert (resp.status, status["code"], status["reason"]) == (400, 400, "BadRequest")
    assert (
        f"request.{field}.{section} must be a JSON object or null, got {kind}"
        in (status["message"])
    )
    assert asked == []


@pytest.mark.parametrize(
    ("operation", "fields"),
    [
        ("DELETE", {"oldObject": JOB}),  # DELETE: object is absent
        ("DELETE", {"object": None, "oldObject": JOB}),  # ... or null
        ("CREATE", {"object": JOB}),  # CREATE: no oldObject
        ("CONNECT", {}),
    ],
)
async def test_an_absent_or_null_object_is_still_well_formed(
    client: TestClient, asked: list[AdmissionRequest], operation: str, fields: dict[str, Any]
) -> None:
    resp = await client.post(
        "/validate/jobs",
        data=orjson.dumps(review(operation, **fields)),
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 200
    assert (await resp.json())["response"]["allowed"] is True
    (request,) = asked
    assert (request.obj is None) == ("object" not in fields or fields["object"] is None)


def test_the_parse_error_carries_the_field_and_the_uid() -> None:
    with pytest.raises(MalformedReview) as err:
        AdmissionRequest.from_review(review("CREATE", object="{}"))
    assert (err.value.field, err.value.uid) == (
        "request.object",
        "705ab4f5-6393-11e8-b7cc-42010a800002",
    )
