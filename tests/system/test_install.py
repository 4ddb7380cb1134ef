"""``helm install`` of the chart as shipped on real kubelet nodes: the Pods start,
readiness is the real probes', and the API server reaches the webhook through
the Service (EndpointSlice → Pod IP) with no connection leaving the machine."""

from __future__ import annotations

import json

import pytest

from testbed.system_tier import NAMESPACE, SystemTier
from tests.system.conftest import VALUES
from tests.webhook.shapes import finalizer_job, new_job_id

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def installed(tier: SystemTier) -> SystemTier:
    result = tier.install(*VALUES)
    assert result.returncode == 0, result.stderr
    tier.wait_ready_or_crash("webhook", 2)
    tier.wait_ready_or_crash("controller", 2)
    return tier


def test_both_deployments_start_and_are_ready_by_their_probes(installed: SystemTier) -> None:
    t = installed
    for component in ("webhook", "controller"):
        pods = t.pods(component)
        assert len(pods) == 2, t.describe()
        for pod in pods:
            statuses = pod["status"]["containerStatuses"]
            assert all(cs["ready"] and cs["restartCount"] == 0 for cs in statuses), t.describe()
            conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
            assert conditions["Ready"] == "True"
            # Ready comes from the probe, not from the bind: the container started
            # before the kubelet marked it Ready.
            [container] = [c for c in pod["spec"]["containers"] if c["name"] == statuses[0]["name"]]
            assert "readinessProbe" in container
    webhook_nodes = {p["spec"]["nodeName"] for p in t.pods("webhook")}
    assert len(webhook_nodes) == 2, "the two webhook replicas share a node"
    assert len(t.ready_endpoints("elb-gate-webhook")) == 2


def test_the_api_server_calls_the_webhook_through_the_service(installed: SystemTier) -> None:
    t = installed
    config = t.cp.admin.get("validatingwebhookconfigurations", None, "elb-gate")
    for hook in config["webhooks"]:
        assert "url" not in hook["clientConfig"]
        assert hook["clientConfig"]["service"]["namespace"] == NAMESPACE
    ns = "st-gate-a"
    job = finalizer_job(ns, new_job_id())
    result = t.kubectl("alice", "create", "-f", "-", input=json.dumps(job))
    assert result.returncode == 1
    assert 'admission webhook "search-admission.elb-gate.io" denied the request: ' in result.stderr
    assert t.egress_dropped() == 0
