"""Warn mode (staged rollout): search admission admits and warns; the Lease guard still enforces."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl
from tests.support.webhook_process import WebhookProcess
from tests.webhook.lease_clients import KubectlLeaseClient, RawHttpLeaseClient
from tests.webhook.shapes import finalizer_job, new_job_id

pytestmark = pytest.mark.kubectl


@pytest.fixture(scope="module")
def warn_hook(emu: Emulator) -> Iterator[WebhookProcess]:
    with WebhookProcess(emu, {"ELB_GATE_ENFORCEMENT": "warn"}) as process:
        yield process


def test_a_would_be_denial_is_admitted_with_short_warnings(
    emu: Emulator, warn_hook: WebhookProcess
) -> None:
    ns = warn_hook.gate_namespace("warn-a")
    job = finalizer_job(ns, new_job_id())
    result = kubectl(emu, "bob", "create", "-f", "-", input=json.dumps(job))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"job.batch/{job['metadata']['name']} created"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings[0].startswith("Warning: search-admission.elb-gate.io would deny: Gate A:")
    assert all(len(line) - len("Warning: ") <= 120 for line in warnings)
    text = " ".join(line[len("Warning: ") :] for line in warnings)
    assert f"Lease {ns}/elb-blast-submit-{ns} does not exist" in text
    assert (
        'elb_gate_would_deny_total{reason="no_lease",webhook="search-admission.elb-gate.io"} 1.0'
        in warn_hook.metrics()
    )


def test_the_lease_guard_enforces_in_warn_mode_too(
    emu: Emulator, warn_hook: WebhookProcess
) -> None:
    ns = warn_hook.gate_namespace("warn-b")
    assert RawHttpLeaseClient(emu, "alice", ns, "openapi-" + "a" * 32).acquire() == "acquired"
    ahead = KubectlLeaseClient(emu, "bob", ns, "dashboard-" + "b" * 32, clock_offset=3600)
    assert ahead.acquire() == "busy"
    assert "lease-guard.elb-gate.io" in ahead.last_stderr
