"""submitterAccess.rbac on the real control plane: in a gated namespace where only
the chart grants Job rights, a user outside the submitter map gets a real 403 from
RBAC before any admission runs, and the mapped identities (each submit path, and
ElasticBLAST's in-cluster service account) do what ElasticBLAST does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed import elastic_blast as elb
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.graph.submitter import Submitter
from tests.security.conftest import finalizer, submitter_access, webhook


@dataclass
class Rbac:
    cp: ControlPlane
    hook: WebhookProcess
    namespace: str
    workdir: Path

    def create(self, user: str, body: str, kubeconfig: str | None = None) -> tuple[int, str, str]:
        done = self.cp.kubectl(
            user, "-n", self.namespace, "create", "-f", "-", input=body, kubeconfig=kubeconfig
        )
        return done.returncode, done.stdout, done.stderr

    def can_i(self, *args: str) -> str:
        done = self.cp.kubectl("admin", "auth", "can-i", *args, "-n", self.namespace)
        return done.stdout.strip()

    def submitter(self, user: str, source: str) -> Submitter:
        return Submitter(self.cp, self.namespace, user, self.workdir, source=source)


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rbac]:
    workdir = tmp_path_factory.mktemp("rbac")
    namespace = control_plane.new_namespace("rbac")
    with webhook(control_plane, workdir, namespace) as hook:
        # Gated, with elb-gate's own RoleBindings, and no Job or Lease rights for anyone:
        # what submitterAccess.rbac grants is all there is.
        hook.install.gate(namespace, open_to_all=False)
        with submitter_access(control_plane, namespace, {"submitterAccess.rbac": True}):
            scene = Rbac(control_plane, hook, namespace, workdir)
            # The authorizer reads RoleBindings from its informer: wait until it has them.
            wait_until(
                lambda: scene.can_i("create", "jobs", "--as", "alice") == "yes",
                60,
                "the RoleBindings in effect",
                0.2,
            )
            yield scene
    control_plane.admin.delete("namespaces", None, namespace)


def forbidden(user: str, resource: str, group: str, namespace: str) -> str:
    return (
        f'Error from server (Forbidden): error when creating "STDIN": {resource}.{group} is forbidden: '
        f'User "{user}" cannot create resource "{resource}" in API group "{group}" in the namespace "{namespace}"\n'
    )


def test_a_user_outside_the_map_gets_a_real_403_creating_a_search_job(rbac: Rbac) -> None:
    code, _, stderr = rbac.create("mallory", finalizer(rbac.namespace, elb.search_id(1)))
    assert code == 1
    assert stderr == forbidden("mallory", "jobs", "batch", rbac.namespace)
    assert rbac.cp.admin.find("jobs", rbac.namespace, "elb-finalizer-00000001") is None


def test_rbac_refuses_an_unmapped_user_any_job_whatever_its_labels(rbac: Rbac) -> None:
    ordinary = elb.ready(elb.finalizer(elb.search_id(9)), rbac.namespace)
    ordinary["metadata"]["labels"] = {"app": "web"}
    ordinary["spec"]["template"]["metadata"]["labels"] = {"app": "web"}
    code, _, stderr = rbac.create("carol", json.dumps(ordinary))
    assert (code, stderr) == (1, forbidden("carol", "jobs", "batch", rbac.namespace))


def test_a_user_outside_the_map_cannot_take_the_submit_lease(rbac: Rbac) -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": f"elb-blast-submit-{rbac.namespace}"},
        "spec": {"holderIdentity": "dashboard-0b3f", "leaseDurationSeconds": 900},
    }
    code, _, stderr = rbac.create("mallory", json.dumps(lease))
    assert (code, stderr) == (
        1,
        forbidden("mallory", "leases", "coordination.k8s.io", rbac.namespace),
    )


def test_the_mapped_submit_path_takes_the_lease_with_one_credential_and_submits_with_another(
    rbac: Rbac,
) -> None:
    lease = rbac.submitter("dashboard-lease", "dashboard").acquire()
    try:
        body = elb.ready(elb.finalizer(elb.search_id(2)), rbac.namespace)
        applied = rbac.submitter("dashboard-apply", "dashboard").apply(body)
        assert applied.ok, applied.stderr
        assert applied.stdout == f"job.batch/{body['metadata']['name']} created\n"
    finally:
        lease.release()
        lease.close()


def test_the_in_cluster_account_joins_the_open_search_but_may_not_touch_the_lease(
    rbac: Rbac, tmp_path: Path
) -> None:
    search = elb.search_id(3)
    alice = rbac.submitter("alice", "openapi").acquire()
    try:
        submit = alice.apply(elb.ready(elb.submit_jobs(search), rbac.namespace))
        assert submit.ok, submit.stderr
    finally:
        alice.release()  # elastic-blast submit returned; the submit Job carries on in-cluster
        alice.close()
    token = rbac.cp.service_account_token(rbac.namespace, "default")
    in_cluster = rbac.cp.write_kubeconfig(
        tmp_path / "in-cluster.kubeconfig", "submit-jobs", token, rbac.namespace
    )
    batch = elb.ready(elb.blast_batch(search, 0), rbac.namespace)
    code, stdout, stderr = rbac.create("admin", json.dumps(batch), kubeconfig=in_cluster)
    assert (code, stdout) == (0, f"job.batch/{batch['metadata']['name']} created\n"), stderr
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": f"elb-blast-submit-{rbac.namespace}"},
        "spec": {"holderIdentity": "openapi-1", "leaseDurationSeconds": 900},
    }
    user = f"system:serviceaccount:{rbac.namespace}:default"
    code, _, stderr = rbac.create("admin", json.dumps(lease), kubeconfig=in_cluster)
    assert (code, stderr) == (1, forbidden(user, "leases", "coordination.k8s.io", rbac.namespace))


def test_kubectl_auth_can_i_lists_exactly_the_mapped_creators(rbac: Rbac) -> None:
    assert rbac.can_i("create", "jobs", "--as", "mallory") == "no"
    assert rbac.can_i("create", "jobs", "--as", "carol", "--as-group", "team") == "no"
    assert rbac.can_i("create", "jobs", "--as", "alice") == "yes"
    assert (
        rbac.can_i("create", "jobs", "--as", "dashboard-apply", "--as-group", "dashboard") == "yes"
    )
    assert (
        rbac.can_i("create", "jobs", "--as", f"system:serviceaccount:{rbac.namespace}:default")
        == "yes"
    )
    assert rbac.can_i("delete", "leases", "--as", "dashboard-lease") == "no"
