"""Fail-closed: when the API cannot answer what a decision needs, the answer is 503, never an admit.

The webhook reaches the API server through a fault-injecting TLS proxy
(:class:`testbed.faultproxy.FaultProxy`); the API server, kubectl and the
submitters are real.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from testbed import elastic_blast as elb
from testbed.clients import DashboardLeaseClient
from testbed.controlplane import ControlPlane
from testbed.faultproxy import Fault, FaultProxy
from testbed.webhook_process import WebhookProcess
from tests.webhook.conftest import API_TIMEOUT_SECONDS, Seeder

pytestmark = [pytest.mark.kubectl, pytest.mark.usefixtures("no_faults_left")]

DENIED = 'admission webhook "search-admission.elb-gate.io" denied the request: '
HANG = API_TIMEOUT_SECONDS + 1.5
"""Past the webhook's per-call deadline, inside the configuration's timeoutSeconds (5)."""


@pytest.fixture(scope="module")
def hook(proxied_hook: WebhookProcess) -> WebhookProcess:
    """The webhook, its ServiceAccount token unchanged, talking through the proxy."""
    return proxied_hook


def fault_for(proxy: FaultProxy, ns: str, read: str, how: str) -> Fault:
    target: dict[str, Any] = (
        {"resource": "jobs", "namespace": ns}
        if read == "census"
        else {"resource": "leases", "namespace": ns, "name": f"elb-blast-submit-{ns}"}
    )
    behaviours: dict[str, dict[str, Any]] = {
        "500": {"status": 500},
        "hang": {"delay": HANG},
        "reset": {"drop": True},
    }
    behaviour = behaviours[how]
    return proxy.add(method="GET", count=None, **target, **behaviour)


def create(cp: ControlPlane, user: str, obj: dict[str, Any]) -> Any:
    return cp.kubectl(user, "create", "-f", "-", input=json.dumps(obj))


@pytest.mark.parametrize("how", ["500", "hang", "reset"])
@pytest.mark.parametrize("read", ["census", "lease"])
def test_a_failing_read_denies_with_503_and_says_what_could_not_be_verified(
    control_plane: ControlPlane, proxy: FaultProxy, ns: str, read: str, how: str
) -> None:
    assert DashboardLeaseClient.on(control_plane, "alice", ns).acquire() == "acquired"
    job = elb.ready(elb.finalizer(elb.search_id()), ns)
    fault = fault_for(proxy, ns, read, how)
    try:
        result = create(control_plane, "alice", job)
    finally:
        proxy.clear()
    assert fault.fired >= 1
    assert result.returncode == 1
    stderr = result.stderr.strip()
    assert stderr.startswith(
        'Error from server (ServiceUnavailable): error when creating "STDIN": ' + DENIED
    ), stderr
    assert DENIED + "elb-gate could not verify Gate A/B" in stderr
    what = (
        f"LIST search Jobs in namespace {ns}"
        if read == "census"
        else f"GET Lease {ns}/elb-blast-submit-{ns}"
    )
    assert what in stderr
    if how == "hang":
        assert f"no answer within {API_TIMEOUT_SECONDS:g}s" in stderr
    assert "fail-closed" in stderr
    # It says it is transient and when to try again (the API server's own 500s cannot).
    assert "This is transient: the request was not applied; retry in 5 s." in stderr
    assert control_plane.admin.find("jobs", ns, job["metadata"]["name"]) is None
    # Once the API answers again, the same request is admitted.
    retry = create(control_plane, "alice", job)
    assert retry.returncode == 0, retry.stderr


def test_a_blast_job_of_a_new_search_fails_closed_when_the_lease_cannot_be_read(
    control_plane: ControlPlane, proxy: FaultProxy, ns: str
) -> None:
    fault_for(proxy, ns, "lease", "500")
    blast = elb.ready(elb.blast_batch(elb.search_id(), 0), ns)
    result = create(control_plane, "alice", blast)
    assert result.returncode == 1
    assert "could not verify" in result.stderr and "API answered 500" in result.stderr
    assert control_plane.admin.find("jobs", ns, blast["metadata"]["name"]) is None


def test_an_api_outage_never_affects_requests_that_need_no_read(
    control_plane: ControlPlane, proxy: FaultProxy, seeded: Seeder
) -> None:
    ns, [job_id] = seeded(1)
    name = elb.ready(elb.blast_batch(job_id, 0), ns)["metadata"]["name"]
    # Every read the webhook could make fails; a Job controller-style write needs none.
    faults = [fault_for(proxy, ns, "census", "500"), fault_for(proxy, ns, "lease", "500")]
    bob = control_plane.api("bob")
    patched = bob.patch("jobs", ns, name, {"metadata": {"annotations": {"note": "ok"}}})
    assert patched["metadata"]["annotations"]["note"] == "ok"
    assert all(fault.fired == 0 for fault in faults)
