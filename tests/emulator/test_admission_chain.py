"""The admission chain: webhooks called over TLS like the apiserver calls them, errors as kubectl shows them."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.emulator.rest import call
from tests.emulator.webhook_server import WebhookServer, allow, deny, patch
from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl

SERVICE = ("elb-system", "elb-gate-webhook")
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
LEASE_RULE = {"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
              "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["leases"]}


def lease_yaml(name: str, labels: str = "") -> str:
    return (f"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {name}\n"
            f"{labels}spec:\n  holderIdentity: a\n")


@pytest.fixture
def hook(emulator: Emulator) -> Iterator[WebhookServer]:
    server = WebhookServer(SERVICE).start()
    emulator.services[SERVICE] = ("127.0.0.1", server.port)
    yield server
    server.stop()


def register(emu: Emulator, server: WebhookServer | None, *, mutating: bool = False,
             name: str = "lease-guard.elb-gate.io", rules: list[dict[str, Any]] | None = None,
             **fields: Any) -> None:
    webhook = {
        "name": name,
        "clientConfig": {"service": {"namespace": SERVICE[0], "name": SERVICE[1],
                                     "path": "/validate"},
                         "caBundle": server.ca_bundle if server else ""},
        "rules": rules or [LEASE_RULE],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **fields,
    }
    kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
    emu.create({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": f"{name}-config"}, "webhooks": [webhook]})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.kubectl
def test_a_denial_is_printed_by_kubectl_as_the_apiserver_words_it(
        emulator: Emulator, hook: WebhookServer) -> None:
    hook.decide = deny("lease held by dashboard-1 until 12:00", code=409, reason="Conflict")
    register(emulator, hook)
    result = kubectl(emulator, "alice", "create", "-f", "-", input=lease_yaml("x"))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'Error from server (Conflict): error when creating "STDIN": admission webhook '
        '"lease-guard.elb-gate.io" denied the request: lease held by dashboard-1 until 12:00')


@pytest.mark.kubectl
def test_with_failure_policy_fail_an_unreachable_webhook_rejects_the_write(
        emulator: Emulator) -> None:
    port = _free_port()
    emulator.services[SERVICE] = ("127.0.0.1", port)
    register(emulator, None, timeoutSeconds=5)
    result = kubectl(emulator, "alice", "create", "-f", "-", input=lease_yaml("x"))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'Error from server (InternalError): error when creating "STDIN": Internal error '
        'occurred: failed calling webhook "lease-guard.elb-gate.io": failed to call webhook: '
        'Post "https://elb-gate-webhook.elb-system.svc:443/validate?timeout=5s": '
        f"dial tcp 127.0.0.1:{port}: connect: connection refused")


def test_with_failure_policy_ignore_an_unreachable_webhook_lets_the_write_through(
        emulator: Emulator) -> None:
    emulator.services[SERVICE] = ("127.0.0.1", _free_port())
    register(emulator, None, failurePolicy="Ignore")
    assert call(emulator, "POST", LEASES, {"apiVersion": "coordination.k8s.io/v1",
                                           "kind": "Lease", "metadata": {"name": "x"}}
                ).status == 201


def test_a_slow_webhook_fails_with_context_deadline_exceeded(
        emulator: Emulator, hook: WebhookServer) -> None:
    hook.delay = 1.5
    register(emulator, hook, timeoutSeconds=1)
    reply = call(emulator, "POST", LEASES, {"metadata": {"name": "slow"}})
    assert reply.status == 500 and reply.body["reason"] == "InternalError"
    assert reply.body["message"].endswith(
        '/validate?timeout=1s": context deadline exceeded')


def test_a_response_with_the_wrong_uid_is_a_call_failure(
        emulator: Emulator, hook: WebhookServer) -> None:
    hook.echo_wrong_uid = True
    register(emulator, hook)
    reply = call(emulator, "POST", LEASES, {"metadata": {"name": "x"}})
    assert reply.status == 500
    assert "received invalid webhook response: expected response.uid=" in reply.body["message"]


def test_a_webhook_not_trusting_the_ca_bundle_fails_tls(
        emulator: Emulator, hook: WebhookServer) -> None:
    register(emulator, WebhookServer(SERVICE))  # another CA than the server's certificate
    reply = call(emulator, "POST", LEASES, {"metadata": {"name": "x"}})
    assert "x509: certificate signed by unknown authority" in reply.body["message"]


def test_denial_codes_below_400_are_raised_to_400_and_empty_messages_explained(
        emulator: Emulator, hook: WebhookServer) -> None:
    hook.decide = lambda request: {"allowed": False, "status": {"code": 200}}
    register(emulator, hook)
    reply = call(emulator, "POST", LEASES, {"metadata": {"name": "x"}})
    assert reply.status == 400
    assert reply.body["message"] == (
        'admission webhook "lease-guard.elb-gate.io" denied the request without explanation')


def test_a_mutating_webhooks_json_patch_is_applied_before_storage(
        emulator: Emulator, hook: WebhookServer) -> None:
    hook.decide = patch([{"op": "add", "path": "/metadata/annotations",
                          "value": {"elb-gate.io/holder-user": "alice"}}])
    register(emulator, hook, mutating=True)
    result = kubectl(emulator, "alice", "create", "-f", "-", input=lease_yaml("m"))
    assert result.returncode == 0, result.stderr
    stored = emulator.get("leases", "default", "m")
    assert stored["metadata"]["annotations"] == {"elb-gate.io/holder-user": "alice"}


def test_mutating_then_validating_and_validators_see_the_mutation(
        emulator: Emulator, hook: WebhookServer) -> None:
    seen: list[str] = []

    def decide(request: dict[str, Any]) -> dict[str, Any]:
        labels = request["object"]["metadata"].get("labels") or {}
        seen.append(labels.get("stamped", "no"))
        if labels.get("stamped"):
            return {"allowed": True}
        return {"allowed": True, "patchType": "JSONPatch", "patch": _b64(
            [{"op": "add", "path": "/metadata/labels", "value": {"stamped": "yes"}}])}

    hook.decide = decide
    register(emulator, hook, mutating=True, name="stamp.elb-gate.io")
    register(emulator, hook, name="check.elb-gate.io")
    assert call(emulator, "POST", LEASES, {"metadata": {"name": "x"}}).status == 201
    assert seen == ["no", "yes"]


def _b64(ops: list[dict[str, Any]]) -> str:
    import base64
    import json

    return base64.b64encode(json.dumps(ops).encode()).decode()


@pytest.mark.kubectl
def test_match_conditions_on_request_name_decide_which_writes_reach_the_webhook(
        emulator: Emulator, hook: WebhookServer) -> None:
    hook.decide = deny("guarded")
    register(emulator, hook, matchConditions=[{
        "name": "submit-leases-only",
        "expression": 'request.name.startsWith("elb-blast-submit-")'}])
    other = kubectl(emulator, "alice", "create", "-f", "-", input=lease_yaml("other"))
    guarded = kubectl(emulator, "alice", "create", "-f", "-",
                      input=lease_yaml("elb-blast-submit-default"))
    assert other.returncode == 0, other.stderr
    assert 'admission webhook "lease-guard.elb-gate.io" denied the request: guarded' in \
        guarded.stderr
    assert [r["name"] for r in hook.requests] == ["elb-blast-submit-default"]


def test_match_conditions_on_object_labels_filter_calls(
        emulator: Emulator, hook: WebhookServer) -> None:
    register(emulator, hook, matchConditions=[{
        "name": "gated", "expression":
        'has(object.metadata.labels) && "app" in object.metadata.labels'}])
    call(emulator, "POST", LEASES, {"metadata": {"name": "plain"}})
    call(emulator, "POST", LEASES, {"metadata": {"name": "gated", "labels": {"app": "x"}}})
    assert [r["name"] for r in hook.requests] == ["gated"]


def test_a_match_condition_error_follows_the_failure_policy(
        emulator: Emulator, hook: WebhookServer) -> None:
    register(emulator, hook, name="strict.elb-gate.io", matchConditions=[{
        "name": "broken", "expression": 'object.metadata.labels["missing"] == "x"'}])
    reply = call(emulator, "POST", LEASES, {"metadata": {"name": "x"}})
    assert (reply.status, reply.body["reason"]) == (403, "Forbidden")
    assert reply.body["message"].startswith('leases.coordination.k8s.io "x" is forbidden: ')
    emulator.delete("validatingwebhookconfigurations", None, "strict.elb-gate.io-config")
    register(emulator, hook, name="lenient.elb-gate.io", failurePolicy="Ignore",
             matchConditions=[{"name": "broken",
                               "expression": 'object.metadata.labels["missing"] == "x"'}])
    assert call(emulator, "POST", LEASES, {"metadata": {"name": "x"}}).status == 201
    assert hook.requests == []


@pytest.mark.kubectl
def test_webhook_warnings_reach_kubectl_stderr(emulator: Emulator, hook: WebhookServer) -> None:
    hook.decide = allow(warnings=['enforcement is "warn": would deny'])
    register(emulator, hook)
    result = kubectl(emulator, "alice", "create", "-f", "-", input=lease_yaml("w"))
    assert result.returncode == 0
    assert 'Warning: enforcement is "warn": would deny' in result.stderr


def test_the_review_carries_user_info_old_object_and_options(
        emulator: Emulator, hook: WebhookServer) -> None:
    register(emulator, hook)
    created = call(emulator, "POST", LEASES, {"metadata": {"name": "r"}, "spec": {}},
                   user="openapi").body
    call(emulator, "PUT", f"{LEASES}/r?dryRun=All",
         {**created, "spec": {"holderIdentity": "b"}}, user="openapi")
    call(emulator, "DELETE", f"{LEASES}/r", {"propagationPolicy": "Background"})
    create, update, delete = hook.requests
    assert create["operation"] == "CREATE" and create["oldObject"] is None
    assert create["kind"] == {"group": "coordination.k8s.io", "version": "v1", "kind": "Lease"}
    assert create["resource"] == {"group": "coordination.k8s.io", "version": "v1",
                                  "resource": "leases"}
    assert create["userInfo"]["username"] == "system:serviceaccount:default:openapi"
    assert create["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"] == ["openapi-7f9"]
    assert create["options"]["kind"] == "CreateOptions" and create["dryRun"] is False
    assert update["operation"] == "UPDATE" and update["dryRun"] is True
    assert update["oldObject"]["spec"] == {} and update["object"]["spec"]["holderIdentity"] == "b"
    assert update["options"]["kind"] == "UpdateOptions"
    assert delete["operation"] == "DELETE" and delete["object"] is None
    assert delete["oldObject"]["metadata"]["name"] == "r"
    assert delete["options"]["propagationPolicy"] == "Background"
    assert delete["userInfo"]["groups"] == ["system:masters", "system:authenticated"]


def test_a_status_rule_sees_status_writes_and_a_plain_rule_does_not(
        emulator: Emulator, hook: WebhookServer) -> None:
    rule = {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["*"]}
    register(emulator, hook, name="jobs.elb-gate.io", rules=[{**rule, "resources": ["jobs"]}])
    register(emulator, hook, name="status.elb-gate.io",
             rules=[{**rule, "resources": ["jobs/status"]}])
    job = emulator.create({"apiVersion": "batch/v1", "kind": "Job",
                           "metadata": {"name": "j"}, "spec": {"template": {}}})
    call(emulator, "PUT", f"{JOBS}/j/status", {**job, "status": {"succeeded": 1}})
    assert [(r["subResource"], r["operation"]) for r in hook.requests] == [("status", "UPDATE")]


def test_namespace_and_object_selectors_limit_the_webhook(
        emulator: Emulator, hook: WebhookServer) -> None:
    emulator.create({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "gated", "labels": {"elb-gate.io/gated": "true"}}})
    register(emulator, hook,
             namespaceSelector={"matchExpressions": [
                 {"key": "elb-gate.io/gated", "operator": "In", "values": ["true"]}]},
             objectSelector={"matchLabels": {"app": "finalizer"}})
    body = {"metadata": {"name": "x", "labels": {"app": "finalizer"}}}
    call(emulator, "POST", LEASES, body)
    call(emulator, "POST", "/apis/coordination.k8s.io/v1/namespaces/gated/leases",
         {"metadata": {"name": "nolabel"}})
    call(emulator, "POST", "/apis/coordination.k8s.io/v1/namespaces/gated/leases", body)
    assert [(r["namespace"], r["name"]) for r in hook.requests] == [("gated", "x")]


def test_dry_run_is_refused_by_a_webhook_with_side_effects(
        emulator: Emulator, hook: WebhookServer) -> None:
    register(emulator, hook, sideEffects="Some")
    reply = call(emulator, "POST", f"{LEASES}?dryRun=All", {"metadata": {"name": "x"}})
    assert (reply.status, reply.body["message"]) == (
        400, 'admission webhook "lease-guard.elb-gate.io" does not support dry run')


def test_a_url_client_config_is_called_directly(emulator: Emulator, hook: WebhookServer) -> None:
    hook.decide = deny("by url")
    emulator.create({"apiVersion": "admissionregistration.k8s.io/v1",
                     "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "by-url"},
                     "webhooks": [{"name": "url.elb-gate.io", "sideEffects": "None",
                                   "admissionReviewVersions": ["v1"], "rules": [LEASE_RULE],
                                   "clientConfig": {
                                       "url": f"https://127.0.0.1:{hook.port}/check",
                                       "caBundle": hook.ca_bundle}}]})
    reply = call(emulator, "POST", LEASES, {"metadata": {"name": "x"}})
    assert reply.body["message"] == 'admission webhook "url.elb-gate.io" denied the request: by url'


def test_webhook_configurations_get_the_apiservers_defaults(emulator: Emulator) -> None:
    register(emulator, None)
    hook = emulator.get("validatingwebhookconfigurations", None,
                        "lease-guard.elb-gate.io-config")["webhooks"][0]
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["matchPolicy"]) == (
        "Fail", 10, "Equivalent")
    assert hook["clientConfig"]["service"]["port"] == 443 and hook["rules"][0]["scope"] == "*"


def test_a_service_with_several_endpoints_spreads_calls_over_them(
        emulator: Emulator, hook: WebhookServer) -> None:
    # Two replicas behind one Service, one serving certificate (one caBundle).
    second = WebhookServer(SERVICE)
    second.ca = hook.ca
    second._cert = hook.ca.issue_cert(second.hostname, "127.0.0.1")
    second.start()
    try:
        emulator.services[SERVICE] = [("127.0.0.1", hook.port), ("127.0.0.1", second.port)]
        register(emulator, hook)
        for n in range(4):
            reply = call(emulator, "POST", LEASES, {"metadata": {"name": f"l{n}"}, "spec": {}},
                         user="alice")
            assert reply.status == 201
        assert (len(hook.requests), len(second.requests)) == (2, 2)
        emulator.services[SERVICE] = []  # no ready endpoint: like a Service with none
        reply = call(emulator, "POST", LEASES, {"metadata": {"name": "l9"}}, user="alice")
        assert reply.status == 500
        assert 'failed calling webhook "lease-guard.elb-gate.io"' in reply.body["message"]
    finally:
        second.stop()
