"""ELB_GATE_CLIENT_AUTH=verify on the real control plane: the API server's admission
calls carry its client certificate (localkube configures it as a self-managed
cluster can), so they get the whole answer; a pod-like caller posting the same
AdmissionReview straight to port 8443 gets the decision without the Lease holder's
user and pod, and costs at most its share in flight, while the API server's calls
go on."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from client import SubmitLease
from elbgate.kube.config import KubeConfig
from elbgate.settings import GateSettings
from testbed import elastic_blast as elb
from testbed.controlplane import ControlPlane, PodIdentity
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.security.conftest import admission_review, finalizer, post_directly, sample, webhook

API_SERVER_NAME = "kube-apiserver-webhook-client"
"""The CN localkube gives the API server's admission client certificate."""


@dataclass
class Scene:
    cp: ControlPlane
    hook: WebhookProcess
    namespace: str
    holder: PodIdentity
    lease: SubmitLease

    def kubectl_create(self, user: str, body: str) -> tuple[int, str]:
        done = self.cp.kubectl(user, "-n", self.namespace, "create", "-f", "-", input=body)
        return done.returncode, done.stderr


@pytest.fixture(scope="module")
def scene(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    workdir = tmp_path_factory.mktemp("verify")
    namespace = control_plane.new_namespace("verify")
    env = {
        "ELB_GATE_CLIENT_AUTH": "verify",
        "ELB_GATE_CLIENT_CA_FILE": control_plane.state["webhookClientCAFile"],
        "ELB_GATE_CLIENT_NAMES": API_SERVER_NAME,
    }
    with webhook(control_plane, workdir, namespace, env) as hook:
        hook.install.gate(namespace)
        # The OpenAPI service's pod holds the submit Lease: its pod is stamped on it.
        holder = control_plane.pod_identity(namespace, "openapi")
        lease = SubmitLease(
            namespace,
            gate=GateSettings(),
            config=KubeConfig.from_kubeconfig(holder.kubeconfig),
            source="in-cluster",
        )
        assert lease.acquire().acquired
        try:
            yield Scene(control_plane, hook, namespace, holder, lease)
        finally:
            lease.release()
            lease.close()
    control_plane.admin.delete("namespaces", None, namespace)


def test_the_api_servers_calls_carry_its_certificate_and_get_the_whole_answer(scene: Scene) -> None:
    before = sample(
        scene.hook, "elb_gate_admission_callers_total", caller="api-server", outcome="answered"
    )
    code, stderr = scene.kubectl_create(
        "mallory", finalizer(scene.namespace, elb.search_id(1), "by-mallory")
    )
    assert code == 1
    assert "Gate A: user mallory does not hold Lease" in stderr
    assert f"(user {scene.holder.username}, pod {scene.holder.stamp})" in stderr
    after = sample(
        scene.hook, "elb_gate_admission_callers_total", caller="api-server", outcome="answered"
    )
    assert after > before
    assert (
        sample(
            scene.hook, "elb_gate_admission_callers_total", caller="unverified", outcome="answered"
        )
        == 0
    )


def test_a_pod_like_caller_gets_the_decision_without_the_holder(scene: Scene) -> None:
    review = admission_review(
        scene.namespace, "mallory", finalizer(scene.namespace, elb.search_id(2), "direct")
    )
    status, answer = post_directly(scene.hook, "/validate/jobs", review)
    assert status == 200
    response = answer["response"]
    assert (response["allowed"], response["status"]["code"], response["status"]["reason"]) == (
        False,
        403,
        "Forbidden",
    )
    assert response["status"]["message"] == (
        "refused (403 Forbidden); elb-gate gives its reasons only to the API server, and this caller "
        "presented no client certificate that ELB_GATE_CLIENT_CA_FILE verifies with a name in "
        "ELB_GATE_CLIENT_NAMES"
    )
    assert scene.holder.pod not in json.dumps(answer) and "in-cluster-" not in json.dumps(answer)
    assert (
        sample(
            scene.hook, "elb_gate_admission_callers_total", caller="unverified", outcome="answered"
        )
        >= 1
    )


def test_a_pod_like_caller_gets_a_small_body_cap(scene: Scene) -> None:
    body = json.loads(finalizer(scene.namespace, elb.search_id(3), "padded"))
    body["metadata"]["annotations"] = {"pad": "x" * 300_000}  # a Job the API server would accept
    status, answer = post_directly(
        scene.hook, "/validate/jobs", admission_review(scene.namespace, "mallory", json.dumps(body))
    )
    assert (status, answer["code"], answer["reason"]) == (413, 413, "RequestEntityTooLarge")
    assert (
        answer["message"]
        == "AdmissionReview larger than 262144 bytes (ELB_GATE_UNVERIFIED_MAX_REQUEST_BYTES)"
    )


def _start_and_hold(hook: WebhookProcess, review: bytes) -> ssl.SSLSocket:
    """A request whose headers and first byte are sent, the rest held back."""
    raw = socket.create_connection(("127.0.0.1", hook.port), timeout=60)
    tls = hook.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
    head = (
        "POST /validate/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(review)}\r\nConnection: close\r\n\r\n"
    )
    tls.sendall(head.encode() + review[:1])
    return tls


def _finish(tls: ssl.SSLSocket, review: bytes) -> str:
    tls.sendall(review[1:])
    chunks = []
    while chunk := tls.recv(65536):
        chunks.append(chunk)
    tls.close()
    return b"".join(chunks).decode()


def test_a_pod_like_caller_gets_two_requests_in_flight_while_the_api_server_goes_on(
    scene: Scene,
) -> None:
    review = admission_review(
        scene.namespace, "mallory", finalizer(scene.namespace, elb.search_id(4), "held")
    )
    held = [_start_and_hold(scene.hook, review) for _ in range(2)]
    try:
        wait_until(
            lambda: sample(scene.hook, "elb_gate_unverified_in_flight") == 2,
            60,
            "two requests in flight",
        )
        status, answer = post_directly(scene.hook, "/validate/jobs", review)
        assert (status, answer["reason"]) == (429, "TooManyRequests")
        assert answer["message"] == (
            "2 requests from 127.0.0.1 are in flight (ELB_GATE_UNVERIFIED_IN_FLIGHT_PER_SOURCE); "
            "callers not verified as the API server get no more"
        )
        code, stderr = scene.kubectl_create(
            "mallory", finalizer(scene.namespace, elb.search_id(4), "meanwhile")
        )
        assert (
            code == 1 and f"pod {scene.holder.stamp}" in stderr
        )  # the API server is answered in full
    finally:
        answers = [_finish(tls, review) for tls in held]
    assert all(a.startswith("HTTP/1.1 200 OK") and "refused (403 Forbidden)" in a for a in answers)
    wait_until(
        lambda: sample(scene.hook, "elb_gate_unverified_in_flight") == 0, 60, "nothing in flight"
    )
    assert (
        sample(
            scene.hook, "elb_gate_admission_callers_total", caller="unverified", outcome="limited"
        )
        == 1
    )


def test_a_forged_review_changes_nothing_in_the_cluster(scene: Scene) -> None:
    """Anyone can claim to be anyone in a hand-made AdmissionReview; only the API
    server's own calls decide real writes, so the answer is all a forger gets."""
    body = finalizer(scene.namespace, elb.search_id(9), "forged")
    review = admission_review(
        scene.namespace, scene.holder.username, body
    )  # claims to be the holder
    status, answer = post_directly(scene.hook, "/validate/jobs", review)
    assert (status, answer["response"]) == (
        200,
        {"uid": answer["response"]["uid"], "allowed": True},
    )
    assert scene.cp.admin.find("jobs", scene.namespace, "forged") is None
    # Judged as a dry run: it reserved no slot in the admission record either.
    record = scene.cp.admin.find("configmaps", scene.namespace, "elb-gate-admissions")
    assert "forged" not in json.dumps(record or {})
