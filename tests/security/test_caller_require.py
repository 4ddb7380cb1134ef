"""ELB_GATE_CLIENT_AUTH=require on the real control plane: only the API server is
answered. The webhook registers (the API server's own calls reach it, certificate
and all) and judges gated writes as ever; a caller without a certificate fails the
TLS handshake, and one holding another certificate of the cluster's CA (a kubelet's,
say) is refused with a 403 before anything is read."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed import elastic_blast as elb
from testbed.controlplane import ControlPlane
from testbed.webhook_process import WebhookProcess
from tests.security.conftest import admission_review, finalizer, post_directly, sample, webhook

API_SERVER_NAME = "kube-apiserver-webhook-client"
NODE = "system:node:aks-blastpool-0"


@dataclass
class Scene:
    cp: ControlPlane
    hook: WebhookProcess
    namespace: str
    workdir: Path


@pytest.fixture(scope="module")
def scene(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    workdir = tmp_path_factory.mktemp("require")
    namespace = control_plane.new_namespace("require")
    env = {
        "ELB_GATE_CLIENT_AUTH": "require",
        "ELB_GATE_CLIENT_CA_FILE": control_plane.state["webhookClientCAFile"],
        "ELB_GATE_CLIENT_NAMES": API_SERVER_NAME,
    }
    # Registering waits until a Lease write through the API server reaches this process:
    # with `require`, only a call that presents the API server's certificate can.
    with webhook(control_plane, workdir, namespace, env) as hook:
        hook.install.gate(namespace)
        yield Scene(control_plane, hook, namespace, workdir)
    control_plane.admin.delete("namespaces", None, namespace)


def node_certificate(cp: ControlPlane, directory: Path) -> tuple[Path, Path]:
    """A client certificate (and key) the cluster's CA signed for a node."""
    pki = Path(cp.state["webhookClientCAFile"]).parent
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NODE)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "node.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "node.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return directory / "node.crt", directory / "node.key"


def test_the_api_server_is_answered_as_ever(scene: Scene) -> None:
    done = scene.cp.kubectl(
        "mallory",
        "-n",
        scene.namespace,
        "create",
        "-f",
        "-",
        input=finalizer(scene.namespace, elb.search_id(1), "by-mallory"),
    )
    assert done.returncode == 1
    assert (
        'admission webhook "search-admission.elb-gate.io" denied the request: Gate A: Lease'
        in done.stderr
    )
    assert (
        sample(
            scene.hook, "elb_gate_admission_callers_total", caller="api-server", outcome="answered"
        )
        >= 2
    )
    assert (
        sample(
            scene.hook, "elb_gate_admission_callers_total", caller="unverified", outcome="answered"
        )
        == 0
    )


def test_a_caller_without_a_certificate_fails_the_handshake(scene: Scene) -> None:
    review = admission_review(
        scene.namespace, "mallory", finalizer(scene.namespace, elb.search_id(3), "anonymous")
    )
    head = f"POST /validate/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(review)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", scene.hook.port), timeout=30) as raw:
        # With TLS 1.3 the client's side of the handshake ends first; the server refuses
        # it when it finds no certificate, and the connection ends unanswered.
        try:
            tls = scene.hook.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
            tls.sendall(head.encode() + review)
            answer = tls.recv(1024)
        except (ssl.SSLError, ConnectionError) as exc:
            answer = f"<{exc.__class__.__name__}>".encode()
    assert not answer.startswith(b"HTTP/"), answer
    assert (
        sample(
            scene.hook, "elb_gate_admission_callers_total", caller="unverified", outcome="answered"
        )
        == 0
    )


def test_another_certificate_of_the_clusters_ca_gets_a_403(scene: Scene, tmp_path: Path) -> None:
    cert, key = node_certificate(scene.cp, tmp_path)
    context = scene.hook.client_context()
    context.load_cert_chain(cert, key)
    review = admission_review(
        scene.namespace, "mallory", finalizer(scene.namespace, elb.search_id(2), "as-node")
    )
    status, answer = post_directly(scene.hook, "/validate/jobs", review, context)
    assert (status, answer["reason"]) == (403, "Forbidden")
    assert answer["message"] == (
        f"client certificate ({NODE}) is not one of ELB_GATE_CLIENT_NAMES ({API_SERVER_NAME}); "
        "only the API server is answered here"
    )
    assert (
        sample(
            scene.hook, "elb_gate_admission_callers_total", caller="unverified", outcome="refused"
        )
        == 1
    )
