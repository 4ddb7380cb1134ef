"""The API server's capacity and everything else in the cluster against an elb-gate
outage: with both webhook replicas gone (configurations still registered,
failurePolicy Fail), only the writes the gates judge are refused — ordinary Jobs,
other Leases and Job deletions go on, because the matchConditions never send them."""

from __future__ import annotations

import json

import pytest

from testbed import elastic_blast as elb
from testbed.controlplane import ControlPlane
from tests.security.conftest import finalizer, webhook


def lease(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": "someone-1", "leaseDurationSeconds": 900},
        }
    )


def test_an_outage_refuses_only_the_writes_the_gates_judge(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    namespace = control_plane.new_namespace("outage")
    try:
        with webhook(control_plane, tmp_path_factory.mktemp("outage"), namespace) as hook:
            hook.install.gate(namespace)
            ordinary = finalizer(namespace, elb.search_id(1), "before", "web")
            assert (
                control_plane.kubectl(
                    "alice", "-n", namespace, "create", "-f", "-", input=ordinary
                ).returncode
                == 0
            )
            hook.kill()

            def create(body: str) -> tuple[int, str]:
                done = control_plane.kubectl(
                    "alice", "-n", namespace, "create", "-f", "-", input=body
                )
                return done.returncode, done.stderr

            assert create(finalizer(namespace, elb.search_id(2), "ordinary", "web")) == (0, "")
            assert create(lease("leader-election")) == (0, "")
            deleted = control_plane.kubectl("alice", "-n", namespace, "delete", "job", "before")
            assert deleted.returncode == 0, deleted.stderr
            code, stderr = create(finalizer(namespace, elb.search_id(3), "search"))
            assert code == 1 and 'failed calling webhook "search-admission.elb-gate.io"' in stderr
            code, stderr = create(lease(f"elb-blast-submit-{namespace}"))
            assert code == 1 and 'failed calling webhook "lease-stamp.elb-gate.io"' in stderr
    finally:
        control_plane.admin.delete("namespaces", None, namespace)
