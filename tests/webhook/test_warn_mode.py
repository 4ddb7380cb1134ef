"""Warn mode (staged rollout): search admission admits and warns; the Lease guard still enforces."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from testbed import elastic_blast as elb
from testbed.clients import DashboardLeaseClient, OpenApiLeaseClient
from testbed.controlplane import ControlPlane
from testbed.webhook_process import WebhookProcess

pytestmark = pytest.mark.kubectl


@pytest.fixture(scope="module")
def warn_hook(control_plane: ControlPlane) -> Iterator[WebhookProcess]:
    with WebhookProcess(control_plane, {"ELB_GATE_ENFORCEMENT": "warn"}) as process:
        yield process


def test_a_would_be_denial_is_admitted_with_short_warnings(
    control_plane: ControlPlane, warn_hook: WebhookProcess
) -> None:
    ns = warn_hook.install.gate(control_plane.new_namespace("warn"))
    job = elb.ready(elb.finalizer(elb.search_id()), ns)
    result = control_plane.kubectl("bob", "create", "-f", "-", input=json.dumps(job))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"job.batch/{job['metadata']['name']} created"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings, result.stderr
    assert warnings[0].startswith("Warning: search-admission.elb-gate.io would deny: Gate A:")
    assert all(len(line) - len("Warning: ") <= 120 for line in warnings)
    text = " ".join(line[len("Warning: ") :] for line in warnings)
    assert f"Lease {ns}/elb-blast-submit-{ns} does not exist" in text
    assert control_plane.admin.find("jobs", ns, job["metadata"]["name"]) is not None
    assert (
        'elb_gate_would_deny_total{reason="no_lease",webhook="search-admission.elb-gate.io"} 1.0'
        in warn_hook.metrics()
    )


def test_the_lease_guard_enforces_in_warn_mode_too(
    control_plane: ControlPlane, warn_hook: WebhookProcess
) -> None:
    ns = warn_hook.install.gate(control_plane.new_namespace("warn"))
    owner = DashboardLeaseClient.on(control_plane, "alice", ns)
    assert owner.acquire() == "acquired"
    ahead = OpenApiLeaseClient.on(control_plane, "bob", ns, clock_offset=3600)
    assert ahead.acquire() == "busy"
    assert 'admission webhook "lease-guard.elb-gate.io" denied the request' in ahead.last_stderr
    lease = control_plane.admin.get("leases", ns, f"elb-blast-submit-{ns}")
    assert lease["spec"]["holderIdentity"] == owner.holder
