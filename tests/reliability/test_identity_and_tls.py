"""Promise 4: identity and TLS.

Whoever does not hold the Lease cannot renew, release, take over or delete it (409
Conflict, which both existing clients read as busy) nor open a search (403, Gate A) —
over raw HTTP and kubectl, for a stranger, a teammate in the holder's group, a pod's
service account and a cluster admin. The admission port speaks TLS 1.2+ only; the
metrics port serves metrics and health and nothing else.
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from elbgate.lease import format_microtime
from elbgate.names import HOLDER_USER_ANNOTATION, lease_name
from tests.kube_emulator import User
from tests.reliability.api_calls import http, jobs_path, kubectl_status, lease_path
from tests.reliability.cluster import Rig, job_body
from tests.reliability.ledger import LEDGER
from tests.support.certs import WEBHOOK_HOST

pytestmark = pytest.mark.kubectl

NS = "identity"
HOLDER = f"openapi-{uuid.uuid4().hex}"
ATTACKERS = ("bob", "carol", "mallory", "admin")
"""A stranger, a teammate in alice's group, a pod's service account, a cluster admin."""
LEASE_ACTIONS = ("renew", "release", "takeover", "forge_stamp", "delete")
JOB_ACTIONS = ("open_search", "finalizer")
EXPECTED = {**dict.fromkeys(LEASE_ACTIONS, 409), **dict.fromkeys(JOB_ACTIONS, 403)}
WEBHOOK_PATHS = ("/metrics", "/healthz", "/readyz")
CONTROLLER_PATHS = (*WEBHOOK_PATHS, "/liveness")
PROBES = (
    "/", "/validate/jobs", "/validate/leases", "/mutate/leases", "/metrics/", "/metrics/x",
    "/debug", "/debug/pprof", "/admin", "/config", "/env", "/settings", "/liveness/x",
    "/.well-known/security.txt", "/%2e%2e/validate/jobs", "/healthz/..", "/metrics%00",
    "/api", "/apis", "/version", "/tls.key", "/etc/elb-gate/tls/tls.key",
)  # fmt: skip


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    users = [
        User.plain("alice", groups=["team"]),
        User.plain("bob"),
        User.plain("carol", groups=["team"]),
    ]
    with Rig([NS], users=users) as started:
        started.wait_until_ready()
        pod = started.emu.create(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mallory-0", "namespace": NS}}
        )
        started.add_user(
            User.service_account(NS, "mallory", pod="mallory-0", pod_uid=pod["metadata"]["uid"])
        )
        yield started


def now() -> str:
    return format_microtime(datetime.now(UTC))


@pytest.fixture(scope="module")
def held(rig: Rig) -> dict[str, Any]:
    """alice holds the Lease for 10 minutes (taken through both webhooks, so stamped)."""
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name(NS), "namespace": NS},
        "spec": {
            "holderIdentity": HOLDER,
            "leaseDurationSeconds": 600,
            "acquireTime": now(),
            "renewTime": now(),
        },
    }
    status, stored = http(rig.emu, "alice", "POST", lease_path(NS), body)
    assert status == 201, stored
    assert stored["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == "alice"
    return stored


def lease_body(rig: Rig, action: str, attacker: str) -> dict[str, Any]:
    stored = rig.emu.get("leases", NS, lease_name(NS))
    spec = stored["spec"]
    spec["renewTime"] = now()
    if action == "release":
        spec["holderIdentity"] = ""
    elif action == "takeover":
        spec["holderIdentity"] = f"{attacker}-{uuid.uuid4().hex}"
        spec["acquireTime"] = now()
    elif action == "forge_stamp":
        stored["metadata"].setdefault("annotations", {})[HOLDER_USER_ANNOTATION] = attacker
    return stored


def attempt(rig: Rig, transport: str, attacker: str, action: str) -> int:
    """One refused-or-not attempt; returns the HTTP code it got."""
    user = rig.emu.users[attacker].name
    if action in JOB_ACTIONS:
        app = "finalizer" if action == "finalizer" else "submit"
        job = job_body(NS, f"{attacker}-{action}-{uuid.uuid4().hex[:6]}", app, uuid.uuid4().hex)
        if transport == "raw":
            return http(rig.emu, user, "POST", jobs_path(NS), job)[0]
        return kubectl_status(rig.emu, user, "-n", NS, "create", "-f", "-", input=json.dumps(job))[
            0
        ]
    if action == "delete":
        if transport == "raw":
            return http(rig.emu, user, "DELETE", lease_path(NS, lease_name(NS)))[0]
        return kubectl_status(rig.emu, user, "-n", NS, "delete", "lease", lease_name(NS))[0]
    body = lease_body(rig, action, attacker)
    if transport == "raw":
        return http(rig.emu, user, "PUT", lease_path(NS, lease_name(NS)), body)[0]
    return kubectl_status(rig.emu, user, "-n", NS, "replace", "-f", "-", input=json.dumps(body))[0]


def test_every_attempt_by_a_non_holder_is_refused_with_the_right_code(
    rig: Rig, held: dict[str, Any]
) -> None:
    outcomes: Counter[tuple[str, int]] = Counter()
    wrong: list[str] = []
    for transport in ("raw", "kubectl"):
        for attacker in ATTACKERS:
            for action in (*LEASE_ACTIONS, *JOB_ACTIONS):
                code = attempt(rig, transport, attacker, action)
                outcomes[(action, code)] += 1
                if code != EXPECTED[action]:
                    wrong.append(f"{transport} {attacker} {action}: {code}")
    runs = sum(outcomes.values())
    LEDGER.record("4", runs=runs, violations=len(wrong), refused=runs - len(wrong))
    assert wrong == []
    assert runs == 2 * len(ATTACKERS) * len(EXPECTED)
    stored = rig.emu.get("leases", NS, lease_name(NS))
    assert stored["spec"]["holderIdentity"] == HOLDER
    assert rig.emu.list("jobs", NS) == []


def test_the_holder_itself_still_renews_after_the_attempts(rig: Rig, held: dict[str, Any]) -> None:
    status, body = http(
        rig.emu, "alice", "PUT", lease_path(NS, lease_name(NS)), lease_body(rig, "renew", "alice")
    )
    assert status == 200, body
    assert body["spec"]["holderIdentity"] == HOLDER


# -- TLS ------------------------------------------------------------------------------------


def handshake(port: int, configure: Callable[[ssl.SSLContext], None], ca_pem: bytes) -> str:
    """The TLS version negotiated, or raise ssl.SSLError/OSError when refused."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    configure(ctx)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=WEBHOOK_HOST) as tls,
    ):
        return str(tls.version())


def only_tls(version: ssl.TLSVersion) -> Callable[[ssl.SSLContext], None]:
    def configure(ctx: ssl.SSLContext) -> None:
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = version
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client offer it: the server must refuse

    return configure


@pytest.mark.filterwarnings(
    "ignore:ssl.TLSVersion:DeprecationWarning"
)  # offering <1.2 is the point
def test_tls_below_1_2_is_refused_and_1_2_and_1_3_are_served_by_both_replicas(rig: Rig) -> None:
    refused = 0
    for hook in rig.hooks:
        ca = hook.certificate.ca_pem
        for old in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
            with pytest.raises((ssl.SSLError, OSError)):
                handshake(hook.port, only_tls(old), ca)
            refused += 1
        assert handshake(hook.port, only_tls(ssl.TLSVersion.TLSv1_2), ca) == "TLSv1.2"
        assert handshake(hook.port, lambda _ctx: None, ca) == "TLSv1.3"
    LEDGER.record("4", runs=refused, tls_old_refused=refused)


def test_plain_http_on_the_admission_port_gets_no_admission_answer(rig: Rig) -> None:
    review = json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "x"}}
    ).encode()
    request = (
        b"POST /validate/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(review)).encode() + b"\r\n\r\n" + review
    )
    for hook in rig.hooks:
        with socket.create_connection(("127.0.0.1", hook.port), timeout=10) as sock:
            sock.sendall(request)
            answer = b""
            try:
                while chunk := sock.recv(65536):
                    answer += chunk
            except (ConnectionResetError, TimeoutError):
                pass
        assert b"AdmissionReview" not in answer and not answer.startswith(b"HTTP/1.1 200"), answer
    LEDGER.record("4", runs=len(rig.hooks), plain_http_refused=len(rig.hooks))


# -- the metrics ports ----------------------------------------------------------------------


def status_of(url: str, method: str) -> int:
    data = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}'
    req = urllib.request.Request(url, data=data if method == "POST" else None, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def probe(base: str, served: tuple[str, ...]) -> list[str]:
    """Every probe path and method; what is not served must be 404 (405: wrong method)."""
    wrong = []
    for path in (*served, *PROBES):
        for method in ("GET", "POST", "PUT", "DELETE"):
            code = status_of(base + path, method)
            ok = {200} if method == "GET" else {405}
            if path not in served:
                ok = {404}
            if code not in ok:
                wrong.append(f"{method} {base}{path}: {code}")
    return wrong


def test_the_metrics_ports_expose_nothing_but_metrics_and_health(rig: Rig) -> None:
    wrong: list[str] = []
    for hook in rig.hooks:
        wrong += probe(hook.metrics_url, WEBHOOK_PATHS)
        assert status_of(hook.metrics_url + "/validate/jobs", "POST") == 404
    for ctl in rig.controllers:
        wrong += probe(f"http://127.0.0.1:{ctl.metrics_port}", CONTROLLER_PATHS)
    probes = (
        len(rig.hooks) * (len(WEBHOOK_PATHS) + len(PROBES))
        + len(rig.controllers) * (len(CONTROLLER_PATHS) + len(PROBES))
    ) * 4
    LEDGER.record("4", runs=probes, violations=len(wrong), metrics_port_probes=probes)
    assert wrong == []


def test_expiry_is_judged_on_the_webhooks_clock_not_the_clients(
    rig: Rig, held: dict[str, Any]
) -> None:
    """A client whose clock runs an hour ahead sends an old-looking renewTime: the guard
    still refuses its takeover (409), because the stored renewTime was stamped by elb-gate."""
    body = lease_body(rig, "takeover", "bob")
    body["spec"]["renewTime"] = format_microtime(datetime.now(UTC) + timedelta(hours=1))
    assert http(rig.emu, "bob", "PUT", lease_path(NS, lease_name(NS)), body)[0] == 409
