"""Deleting a gated namespace while its submit Lease is held.

The namespace controller empties a namespace being deleted, Leases included.
The Lease guard refuses the DELETE of a live submit Lease to everyone else;
refusing the namespace controller too would leave the namespace Terminating
until the holder's TTL (15 minutes by default) ran out.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from elbgate.lease import format_microtime
from testbed.api import ApiError
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess


def test_a_gated_namespace_with_a_held_lease_is_deleted(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    ns = hook.install.gate(control_plane.new_namespace("doomed"))
    name = f"elb-blast-submit-{ns}"
    now = format_microtime(datetime.now(UTC))
    alice = control_plane.api("alice")
    alice.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "holderIdentity": "openapi-0c4e5d6f7a8b4c9d8e7f6a5b4c3d2e1f",
                "leaseDurationSeconds": 900,
                "acquireTime": now,
                "renewTime": now,
            },
        }
    )
    with pytest.raises(ApiError) as refused:
        control_plane.api("bob").delete("leases", ns, name)
    assert refused.value.status == 409  # nobody else may delete it

    control_plane.admin.delete("namespaces", None, ns)
    wait_until(
        lambda: control_plane.admin.find("namespaces", None, ns) is None,
        120,
        f"namespace {ns} to be gone",
    )


def test_a_delete_collection_of_leases_cannot_remove_a_held_submit_lease(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    # DELETECOLLECTION names each Lease only in its oldObject (request.name is
    # empty): the guard's match condition must still send it to elb-gate.
    ns = hook.install.gate(control_plane.new_namespace("collection"))
    name = f"elb-blast-submit-{ns}"
    now = format_microtime(datetime.now(UTC))
    control_plane.api("alice").create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "holderIdentity": "openapi-9a8b7c6d5e4f4a3b2c1d0e9f8a7b6c5d",
                "leaseDurationSeconds": 900,
                "acquireTime": now,
                "renewTime": now,
            },
        }
    )
    admin = control_plane.admin
    with pytest.raises(ApiError) as refused:
        admin.request("DELETE", admin.resource("leases").path(ns))
    assert refused.value.status == 409
    assert "never deleted" in refused.value.message
    assert admin.find("leases", ns, name) is not None
