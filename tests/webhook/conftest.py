"""Fixtures for the integration tests: the session's control plane and one real
webhook process per module, registered with the shipped configurations.

The fast tier is enough for these modules: they test the webhook's decisions over real
TLS through the API server's admission chain, not the install (tests/system/)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from elbgate.lease import parse_microtime
from testbed import elastic_blast as elb
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import SHORT_LEASES, WebhookProcess

API_TIMEOUT_SECONDS = 2.0
"""The process's deadline per API call (ELB_GATE_API_TIMEOUT_SECONDS), well inside 5 s."""


@pytest.fixture(scope="package")
def webhook_env() -> dict[str, str]:
    return {"ELB_GATE_API_TIMEOUT_SECONDS": str(API_TIMEOUT_SECONDS)}


Seeder = Callable[[int], tuple[str, list[str]]]


@pytest.fixture
def seeded(control_plane: ControlPlane, hook: WebhookProcess) -> Seeder:
    """``seeded(n)`` → a gated namespace already running ``n`` searches, and their ids.

    The searches' blast Jobs are created while the namespace is not yet gated
    (no webhook is called for it), as a cluster where elb-gate is installed
    under running work; then the namespace is gated. Their Pods run until
    deleted, so the searches stay active."""

    def make(count: int) -> tuple[str, list[str]]:
        namespace = control_plane.new_namespace("gated")
        ids = sorted(elb.search_id() for _ in range(count))
        for job_id in ids:
            control_plane.admin.create(elb.ready(elb.blast_batch(job_id, 0), namespace))
        return hook.install.gate(namespace), ids

    return make


def decisions(hook: WebhookProcess, namespace: str) -> list[dict[str, object]]:
    """The webhook's admission log records for ``namespace`` (this run's)."""
    return [r for r in hook.logs("admission") if r.get("namespace") == namespace]


SHORT_LEASE_ENV = {"ELB_GATE_API_TIMEOUT_SECONDS": str(API_TIMEOUT_SECONDS), **SHORT_LEASES}
"""The package's webhook with :data:`testbed.webhook_process.SHORT_LEASES`."""


def wait_expired(cp: ControlPlane, namespace: str) -> None:
    """Wait until the submit Lease in ``namespace`` is past its renewTime (the
    webhook's stamp) + leaseDurationSeconds on this host's clock, which is the
    webhook's clock."""
    name = f"elb-blast-submit-{namespace}"

    def expired() -> bool:
        spec = cp.admin.get("leases", namespace, name)["spec"]
        renewed = parse_microtime(spec["renewTime"])
        assert isinstance(renewed, datetime)
        due = renewed + timedelta(seconds=spec["leaseDurationSeconds"])
        return datetime.now(UTC) > due + timedelta(milliseconds=50)

    wait_until(expired, 60, f"Lease {namespace}/{name} to expire")
