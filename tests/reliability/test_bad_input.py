"""Promise 3: bad input never crashes the webhook, and never admits a gated Job without proof.

Property-based (hypothesis) against the real webhook process (``python -m webhook``,
over one kept-alive HTTPS connection), reading the real API server where alice holds
the Lease of namespace ``gated`` and nobody holds one in ``free``: malformed,
truncated, oversized, wrongly typed and hostile AdmissionReviews get a 4xx with a
Status, or a well-formed AdmissionReview echoing the uid — and a search Job by anyone
but alice, or a write to alice's live Lease by anyone else, is never allowed.
"""

from __future__ import annotations

import http.client
import json
import ssl
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elbgate.names import lease_name
from testbed.controlplane import ControlPlane
from testbed.reliability import calls
from testbed.reliability.ledger import LEDGER
from testbed.reliability.review_strategies import (
    FREE_NS,
    GATED_NS,
    HOLDER,
    HOLDER_USER,
    any_review,
    gated_job_review,
    lease_attack_review,
    live_lease,
    opens_or_finalizes_search,
    username,
)
from testbed.reliability.rig import SHARED_ENV
from testbed.webhook_process import WebhookProcess

MAX_BYTES = 65536
PATHS = ("/validate/jobs", "/validate/leases", "/mutate/leases")
EXAMPLES = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
"""Bounded for CI and derandomized (a fixed seed); ``make fuzz`` runs the long search."""
COUNTS: Counter[str] = Counter()


def hold_for_alice(cp: ControlPlane) -> None:
    """alice holds GATED_NS's Lease for an hour, taken through the real webhook (so the
    stamp is elb-gate's); on a control plane reused from an earlier run she renews it."""
    alice = cp.api(HOLDER_USER)
    body = live_lease()
    body["metadata"] = {"name": lease_name(GATED_NS), "namespace": GATED_NS}
    status, answer = calls.request(alice, "POST", calls.lease_path(GATED_NS), body)
    if status == 409:
        stored = cp.admin.get("leases", GATED_NS, lease_name(GATED_NS))
        assert stored["spec"]["holderIdentity"] == HOLDER, stored
        stored["spec"]["renewTime"] = live_lease()["spec"]["renewTime"]
        path = calls.lease_path(GATED_NS, lease_name(GATED_NS))
        status, answer = calls.request(alice, "PUT", path, stored)
    assert status in (200, 201), answer


@pytest.fixture(scope="module")
def server(control_plane: ControlPlane) -> Iterator[WebhookProcess]:
    """The webhook, reading the control plane as its own ServiceAccount, where alice
    holds GATED_NS's Lease and nobody holds FREE_NS's."""
    pod = f"bad-input-hook-{uuid.uuid4().hex[:5]}"
    env = {**SHARED_ENV, "ELB_GATE_MAX_REQUEST_BYTES": str(MAX_BYTES)}
    try:
        with WebhookProcess(control_plane, env, pod=pod, namespaces=[GATED_NS, FREE_NS]) as hook:
            hold_for_alice(control_plane)
            yield hook
    finally:
        LEDGER.record("3", runs=sum(COUNTS.values()), **dict(COUNTS))


@pytest.fixture(scope="module")
def conn(server: WebhookProcess) -> Iterator[list[http.client.HTTPConnection]]:
    context = server.client_context()
    holder: list[http.client.HTTPConnection] = [
        http.client.HTTPSConnection("127.0.0.1", server.port, timeout=30, context=context)
    ]
    yield holder
    holder[0].close()


def post(
    conn: list[http.client.HTTPConnection],
    path: str,
    body: bytes,
    content_type: str = "application/json",
) -> tuple[int, bytes]:
    """POST on a kept-alive connection (reconnecting if the server closed it)."""
    for attempt in range(2):
        try:
            conn[0].request("POST", path, body=body, headers={"Content-Type": content_type})
            resp = conn[0].getresponse()
            return resp.status, resp.read()
        except (http.client.HTTPException, ConnectionError, ssl.SSLError):
            conn[0].close()  # the next request opens it again
            if attempt:
                raise
    raise AssertionError("unreachable")


def check_answer(status: int, raw: bytes, sent: Any) -> dict[str, Any] | None:
    """A 4xx with a Status, or a 200 AdmissionReview echoing the uid; returns the response."""
    assert status == 200 or 400 <= status < 500, (status, raw[:300])
    body = orjson.loads(raw)
    if status != 200:
        assert body["kind"] == "Status" and body["code"] == status and body["message"]
        return None
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert isinstance(response["allowed"], bool)
    assert response["uid"] == sent["request"]["uid"]
    if not response["allowed"]:
        assert 400 <= response["status"]["code"] < 600 and response["status"]["message"]
    assert "Traceback" not in raw.decode(errors="replace")
    return dict(response)


@EXAMPLES
@given(
    review=any_review,
    path=st.sampled_from(PATHS),
    cut=st.one_of(st.none(), st.integers(0, 400)),
    content_type=st.sampled_from(
        ["application/json", "application/json; charset=utf-8", "text/plain", ""]
    ),
)
def test_any_body_gets_a_4xx_or_a_well_formed_review(
    conn: list[http.client.HTTPConnection],
    review: Any,
    path: str,
    cut: int | None,
    content_type: str,
) -> None:
    raw = json.dumps(review).encode()  # big integers and Infinity included: bad input too
    if cut is not None:
        raw = raw[:cut]  # truncated
    status, answer = post(conn, path, raw, content_type)
    COUNTS["any_body"] += 1
    response = check_answer(status, answer, review)
    if response is not None and path == "/validate/jobs":
        request = review["request"]
        if opens_or_finalizes_search(request) and username(request) != HOLDER_USER:
            assert not response["allowed"], review


@EXAMPLES
@given(review=gated_job_review())
def test_a_search_job_by_anyone_but_the_holder_is_never_admitted(
    conn: list[http.client.HTTPConnection], review: dict[str, Any]
) -> None:
    request = review["request"]
    status, answer = post(conn, "/validate/jobs", json.dumps(review).encode())
    COUNTS["gated_jobs"] += 1
    response = check_answer(status, answer, review)
    if response is None:
        COUNTS["gated_jobs_4xx"] += 1
        return  # refused as malformed (e.g. Infinity in the JSON): not admitted
    if username(request) == HOLDER_USER and request["namespace"] == GATED_NS:
        return  # the holder: proof exists
    if opens_or_finalizes_search(request):
        COUNTS["gated_jobs_refused"] += 1
        assert not response["allowed"], review


@EXAMPLES
@given(review=lease_attack_review())
def test_a_write_to_a_live_lease_by_a_non_holder_is_never_admitted(
    conn: list[http.client.HTTPConnection], review: dict[str, Any]
) -> None:
    raw = json.dumps(review).encode()
    COUNTS["lease_attacks"] += 1
    response = check_answer(*post(conn, "/validate/leases", raw), review)
    assert response is None or not response["allowed"], review
    # The mutating stamp never crashes on it either, and never changes the holder.
    stamp = check_answer(*post(conn, "/mutate/leases", raw), review)
    assert stamp is None or "holderIdentity" not in json.dumps(stamp.get("patch", ""))


def test_an_oversized_review_gets_413_and_the_server_keeps_answering(
    conn: list[http.client.HTTPConnection],
) -> None:
    groups = ["g" * 64] * 100_000  # a huge userInfo.groups list
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "big",
            "operation": "CREATE",
            "userInfo": {"username": "bob", "groups": groups},
        },
    }
    status, answer = post(conn, "/validate/jobs", orjson.dumps(review))
    assert status == 413, answer[:200]
    assert orjson.loads(answer)["reason"] == "RequestEntityTooLarge"
    status, _ = post(conn, "/validate/jobs", b"{}")
    assert status == 400
    COUNTS["oversized"] += 2


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b"", "application/json", 400),
        (b"{", "application/json", 400),
        (b"\xff\xfe\x00", "application/json", 400),
        (b"[]", "application/json", 400),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}',
            "application/json",
            400,
        ),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":""}}',
            "application/json",
            400,
        ),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}', "application/json", 400),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"u"}}',
            "application/json",
            400,
        ),
        (b"{}", "application/x-www-form-urlencoded", 415),
        (b"\x00" * 1000, "application/octet-stream", 415),
    ],
)
def test_malformed_requests_get_a_clear_4xx(
    conn: list[http.client.HTTPConnection], body: bytes, content_type: str, expected: int
) -> None:
    for path in PATHS:
        status, answer = post(conn, path, body, content_type)
        assert status == expected, answer
        assert orjson.loads(answer)["kind"] == "Status"
        COUNTS["malformed"] += 1


def test_the_holder_is_admitted_so_the_refusals_are_not_blanket(
    conn: list[http.client.HTTPConnection],
) -> None:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "holder",
            "operation": "CREATE",
            "namespace": GATED_NS,
            "name": "elb-submit-1",
            "userInfo": {"username": HOLDER_USER},
            "object": {
                "metadata": {
                    "name": "elb-submit-1",
                    "labels": {"app": "submit", "elb-job-id": "s1"},
                }
            },
        },
    }
    response = check_answer(*post(conn, "/validate/jobs", orjson.dumps(review)), review)
    assert response is not None and response["allowed"] is True
    assert lease_name(GATED_NS).startswith("elb-blast-submit-")
