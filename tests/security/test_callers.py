"""Telling the API server from other callers, as pure tables: the certificate names
that count, the per-source limit, and what an unverified caller is told."""

from __future__ import annotations

from typing import Any

import pytest

from elbgate.settings import Settings, SettingsError, WebhookSettings
from webhook.callers import (
    CallerPolicy,
    SourceLimit,
    certificate_names,
    classify,
    without_reasons,
)
from webhook.review import AdmissionResponse, allowed, denied, patched

API_SERVER = "kube-apiserver-webhook-client"


def peercert(cn: str | None = None, *dns: str) -> dict[str, Any]:
    """What ``SSLSocket.getpeercert()`` returns for a verified certificate."""
    subject = [(("organizationName", "example"),)]
    if cn is not None:
        subject.append((("commonName", cn),))
    return {"subject": tuple(subject), "subjectAltName": tuple(("DNS", d) for d in dns)}


@pytest.mark.parametrize(
    ("mode", "cert", "kind", "refused"),
    [
        pytest.param(
            "off", None, "unknown", False, id="off: no certificate asked, every caller alike"
        ),
        pytest.param(
            "off", peercert(API_SERVER), "unknown", False, id="off: a certificate changes nothing"
        ),
        pytest.param(
            "verify", peercert(API_SERVER), "api-server", False, id="verify: the API server's CN"
        ),
        pytest.param(
            "verify",
            peercert("x", API_SERVER),
            "api-server",
            False,
            id="verify: the API server's name as a DNS SAN",
        ),
        pytest.param(
            "verify", None, "unverified", False, id="verify: no certificate is served, unverified"
        ),
        pytest.param(
            "verify",
            peercert("system:node:aks-1"),
            "unverified",
            False,
            id="verify: another client of the same CA",
        ),
        pytest.param(
            "verify", peercert(None), "unverified", False, id="verify: a certificate without names"
        ),
        pytest.param(
            "require", peercert(API_SERVER), "api-server", False, id="require: the API server"
        ),
        pytest.param(
            "require",
            peercert("system:node:aks-1"),
            "unverified",
            True,
            id="require: another client of the same CA is refused",
        ),
    ],
)
def test_a_caller_is_the_api_server_only_with_a_verified_certificate_of_an_allowed_name(
    mode: Any, cert: dict[str, Any] | None, kind: str, refused: bool
) -> None:
    caller = classify(mode, cert, (API_SERVER,), "10.244.1.7")
    assert (caller.kind, bool(caller.refused)) == (kind, refused)
    assert caller.source == "10.244.1.7"


def test_a_refusal_names_the_certificate_and_the_setting() -> None:
    caller = classify("require", peercert("system:node:aks-1"), (API_SERVER,), "10.0.0.9")
    assert caller.refused == (
        "client certificate (system:node:aks-1) is not one of ELB_GATE_CLIENT_NAMES "
        f"({API_SERVER}); only the API server is answered here"
    )


def test_certificate_names_are_the_common_names_then_the_dns_names_once_each() -> None:
    assert certificate_names(peercert("a", "b", "a", "c")) == ("a", "b", "c")
    assert certificate_names(None) == () and certificate_names({}) == ()


def test_a_source_gets_its_share_and_no_more_while_others_get_theirs() -> None:
    totals: list[int] = []
    limit = SourceLimit(2, totals.append)
    with limit.enter("10.0.0.1") as first, limit.enter("10.0.0.1") as second:
        with limit.enter("10.0.0.1") as third, limit.enter("10.0.0.2") as other:
            assert (first, second, third, other) == (True, True, False, True)
            assert limit.in_flight == 3
    assert limit.in_flight == 0
    assert totals == [1, 2, 3, 2, 1, 0]
    with limit.enter("10.0.0.1") as again:
        assert again


def test_a_source_leaves_its_share_when_the_request_raises() -> None:
    limit = SourceLimit(1)
    with pytest.raises(RuntimeError), limit.enter("10.0.0.1"):
        raise RuntimeError("handler failed")
    assert limit.in_flight == 0


HELD = (
    "Lease ns/elb-blast-submit-ns is held by dashboard-1 (user dashboard-lease, pod "
    "blast/dashboard-7f9/1c0d) and expires 2026-11-29T12:15:25Z (in 4m10s)"
)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        pytest.param(
            denied(409, "Conflict", HELD),
            AdmissionResponse(
                allowed=False,
                code=409,
                reason="Conflict",
                message="refused (409 Conflict); elb-gate gives its reasons only to the API "
                "server, and this caller presented no client certificate that "
                "ELB_GATE_CLIENT_CA_FILE verifies with a name in ELB_GATE_CLIENT_NAMES",
            ),
            id="a denial keeps its status and loses its text",
        ),
        pytest.param(
            allowed().with_warnings(f"search-admission.elb-gate.io would deny: {HELD}"),
            AdmissionResponse(allowed=True),
            id="warn mode: the warnings go too",
        ),
        pytest.param(
            patched(
                [{"op": "add", "path": "/spec/renewTime", "value": "2026-11-29T12:00:00.000000Z"}]
            ),
            patched(
                [{"op": "add", "path": "/spec/renewTime", "value": "2026-11-29T12:00:00.000000Z"}]
            ),
            id="the stamp's patch is kept",
        ),
    ],
)
def test_an_unverified_caller_is_told_the_decision_without_its_reasons(
    response: AdmissionResponse, expected: AdmissionResponse
) -> None:
    assert without_reasons(response.complete("u1")) == expected.complete("u1")
    assert "dashboard" not in str(without_reasons(response).to_review())


def test_off_makes_no_policy_and_the_others_need_a_ca_and_names() -> None:
    assert CallerPolicy.from_settings(WebhookSettings()) is None
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"ELB_GATE_CLIENT_AUTH": "verify"})
    assert raised.value.problems == [
        "ELB_GATE_CLIENT_AUTH=verify needs ELB_GATE_CLIENT_CA_FILE (the CA that signs the API "
        "server's admission client certificate) and ELB_GATE_CLIENT_NAMES (the names that "
        "certificate carries)"
    ]
    with pytest.raises(SettingsError, match="ELB_GATE_CLIENT_AUTH='mtls': must be one of off"):
        Settings.from_env({"ELB_GATE_CLIENT_AUTH": "mtls"})
    policy = CallerPolicy.from_settings(
        Settings.from_env(
            {
                "ELB_GATE_CLIENT_AUTH": "require",
                "ELB_GATE_CLIENT_CA_FILE": "/etc/elb-gate/client-ca/ca.crt",
                "ELB_GATE_CLIENT_NAMES": f"{API_SERVER}, front-proxy-client",
            }
        ).webhook
    )
    assert policy is not None
    assert (policy.mode, policy.names) == ("require", (API_SERVER, "front-proxy-client"))
    assert (policy.limit.per_source, policy.unverified_max_bytes) == (2, 256 * 1024)
