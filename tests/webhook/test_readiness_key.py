"""The readiness key: a submit path, with only the Lease access its submitter RBAC
gives it, reads the Lease ``elb-gate-admission`` of its namespace as held and
unexpired while a webhook replica serves, and expired once none does."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from elbgate.names import ADMISSION_READY_LEASE
from testbed.clients import is_expired
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess

pytestmark = pytest.mark.kubectl

POD = "elb-gate-webhook-readiness"


def serving(control_plane: ControlPlane, namespace: str) -> bool:
    """What a client concludes, by its own Lease rule (no skew: the test's one clock)."""
    lease = control_plane.api("alice").find("leases", namespace, ADMISSION_READY_LEASE)
    if lease is None:
        return False
    spec = lease.get("spec") or {}
    return bool(spec.get("holderIdentity")) and not is_expired(
        spec, datetime.now(UTC), skew=0, default_ttl=0
    )


def test_the_key_is_held_while_a_replica_serves_and_expires_when_none_does(
    control_plane: ControlPlane,
) -> None:
    a, b = control_plane.new_namespace("ready"), control_plane.new_namespace("ready")
    env = {"ELB_GATE_NAMESPACES": f"{a},{b}"}
    hook = WebhookProcess(control_plane, env, pod=POD, namespaces=(a, b))
    with hook:
        wait_until(lambda: serving(control_plane, a) and serving(control_plane, b), 60, "the key")
        lease = control_plane.api("alice").get("leases", a, ADMISSION_READY_LEASE)
        assert lease["spec"]["holderIdentity"] == POD
        first = lease["spec"]["renewTime"]
        wait_until(
            lambda: (
                control_plane.admin.get("leases", a, ADMISSION_READY_LEASE)["spec"]["renewTime"]
                != first
            ),
            60,
            "a renewal",
        )
        # Alice may read it; the webhook's own configurations never judge it.
        assert hook.process is not None and hook.process.poll() is None
    # No replica left: the key stops being renewed and reads as not serving.
    wait_until(lambda: not serving(control_plane, a), 90, "the key expired")
