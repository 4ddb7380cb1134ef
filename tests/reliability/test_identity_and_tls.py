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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from elbgate.lease import format_microtime
from elbgate.names import HOLDER_USER_ANNOTATION, SEARCH_JOB_SELECTOR, lease_name
from testbed.api import Api
from testbed.certs import WEBHOOK_HOST
from testbed.clients import DashboardLeaseClient
from testbed.controlplane import ControlPlane, PodIdentity
from testbed.reliability.calls import jobs_path, kubectl_status, lease_path, request
from testbed.reliability.jobs import running_job
from testbed.reliability.ledger import LEDGER
from testbed.reliability.rig import Rig

HOLDER = f"openapi-{uuid.uuid4()}"
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


@dataclass(frozen=True)
class Who:
    """An identity's API client and kubeconfig."""

    api: Api
    kubeconfig: str


@pytest.fixture(scope="module")
def ns(control_plane: ControlPlane) -> str:
    return control_plane.new_namespace("identity")


@pytest.fixture(scope="module")
def rig(control_plane: ControlPlane, ns: str) -> Iterator[Rig]:
    with Rig(control_plane, [ns]) as started:
        started.wait_until_ready()
        yield started


@pytest.fixture(scope="module")
def mallory(control_plane: ControlPlane, ns: str) -> PodIdentity:
    return control_plane.pod_identity(ns, "mallory")


@pytest.fixture(scope="module")
def people(control_plane: ControlPlane, mallory: PodIdentity) -> dict[str, Who]:
    out = {
        name: Who(control_plane.api(name), control_plane.kubeconfig(name))
        for name in ("alice", "bob", "carol", "admin")
    }
    out["mallory"] = Who(control_plane.api_for_token(mallory.token), mallory.kubeconfig)
    return out


def now() -> str:
    return format_microtime(datetime.now(UTC))


@pytest.fixture(scope="module")
def held(rig: Rig, ns: str) -> dict[str, Any]:
    """alice holds the Lease for 10 minutes (taken through the webhooks, so stamped)."""
    alice = DashboardLeaseClient.on(rig.cp, "alice", ns, holder=HOLDER, ttl=600)
    assert alice.acquire() == "acquired", alice.last_answer
    stored = alice.last_answer
    assert stored["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == "alice"
    return stored


def lease_body(rig: Rig, ns: str, action: str, attacker: str) -> dict[str, Any]:
    stored = rig.cp.admin.get("leases", ns, lease_name(ns))
    spec = stored["spec"]
    spec["renewTime"] = now()
    if action == "release":
        spec["holderIdentity"] = ""
    elif action == "takeover":
        spec["holderIdentity"] = f"{attacker}-{uuid.uuid4()}"
        spec["acquireTime"] = now()
    elif action == "forge_stamp":
        stored["metadata"].setdefault("annotations", {})[HOLDER_USER_ANNOTATION] = attacker
    return stored


def attempt(rig: Rig, ns: str, who: Who, transport: str, attacker: str, action: str) -> int:
    """One refused-or-not attempt; returns the HTTP code it got."""
    cp = rig.cp
    if action in JOB_ACTIONS:
        app = "finalizer" if action == "finalizer" else "submit"
        name = f"{attacker}-{action.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
        job = running_job(ns, name, app, uuid.uuid4().hex)
        if transport == "raw":
            return request(who.api, "POST", jobs_path(ns), job)[0]
        return kubectl_status(
            cp, who.kubeconfig, "-n", ns, "create", "-f", "-", input=json.dumps(job)
        )
    if action == "delete":
        if transport == "raw":
            return request(who.api, "DELETE", lease_path(ns, lease_name(ns)))[0]
        return kubectl_status(cp, who.kubeconfig, "-n", ns, "delete", "lease", lease_name(ns))
    body = lease_body(rig, ns, action, attacker)
    if transport == "raw":
        return request(who.api, "PUT", lease_path(ns, lease_name(ns)), body)[0]
    return kubectl_status(
        cp, who.kubeconfig, "-n", ns, "replace", "-f", "-", input=json.dumps(body)
    )


def test_every_attempt_by_a_non_holder_is_refused_with_the_right_code(
    rig: Rig, ns: str, people: dict[str, Who], held: dict[str, Any]
) -> None:
    outcomes: Counter[tuple[str, int]] = Counter()
    wrong: list[str] = []
    for transport in ("raw", "kubectl"):
        for attacker in ATTACKERS:
            for action in (*LEASE_ACTIONS, *JOB_ACTIONS):
                code = attempt(rig, ns, people[attacker], transport, attacker, action)
                outcomes[(action, code)] += 1
                if code != EXPECTED[action]:
                    wrong.append(f"{transport} {attacker} {action}: {code}")
    runs = sum(outcomes.values())
    LEDGER.record("4", runs=runs, violations=len(wrong), refused=runs - len(wrong))
    assert wrong == []
    assert runs == 2 * len(ATTACKERS) * len(EXPECTED)
    stored = rig.cp.admin.get("leases", ns, lease_name(ns))
    assert stored["spec"]["holderIdentity"] == HOLDER
    assert rig.cp.admin.list("jobs", ns, label_selector=SEARCH_JOB_SELECTOR) == []


def test_the_holder_itself_still_renews_after_the_attempts(
    rig: Rig, ns: str, people: dict[str, Who], held: dict[str, Any]
) -> None:
    status, body = request(
        people["alice"].api,
        "PUT",
        lease_path(ns, lease_name(ns)),
        lease_body(rig, ns, "renew", "alice"),
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
    rig: Rig, ns: str, people: dict[str, Who], held: dict[str, Any]
) -> None:
    """A client whose clock runs an hour ahead sends an old-looking renewTime: the guard
    still refuses its takeover (409), because the stored renewTime was stamped by elb-gate."""
    body = lease_body(rig, ns, "takeover", "bob")
    body["spec"]["renewTime"] = format_microtime(datetime.now(UTC) + timedelta(hours=1))
    assert request(people["bob"].api, "PUT", lease_path(ns, lease_name(ns)), body)[0] == 409
