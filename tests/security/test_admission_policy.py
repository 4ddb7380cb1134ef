"""submitterAccess.admissionPolicy on the real control plane: in a gated namespace
where every user may create Jobs (as on a cluster whose RBAC does not restrict
it), the API server itself refuses a search Job — gated `app`, near miss, or an
ordinary Job relabelled into one — from anyone outside the submitter map, and
lets the mapped submit paths and the in-cluster service account through to the
gates. It holds while the webhook is down and after its configurations are
removed (the emergency off switch)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed import elastic_blast as elb
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.graph.submitter import Submitter
from tests.security.conftest import finalizer, job, policy_refuses, submitter_access, webhook

POLICY = "elb-gate-search-jobs"


@dataclass
class Policy:
    cp: ControlPlane
    hook: WebhookProcess
    namespace: str
    workdir: Path

    def create(self, user: str, body: str, kubeconfig: str | None = None) -> tuple[int, str, str]:
        done = self.cp.kubectl(
            user, "-n", self.namespace, "create", "-f", "-", input=body, kubeconfig=kubeconfig
        )
        return done.returncode, done.stdout, done.stderr

    def refused(
        self, user: str, name: str, app: str, verb: str = 'error when creating "STDIN": '
    ) -> str:
        """What kubectl prints when the policy refuses ``user``'s Job ``name``."""
        ns = self.namespace
        return (
            f'Error from server (Forbidden): {verb}jobs.batch "{name}" is forbidden: '
            f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: "
            f"Job {ns}/{name} (app={app}) is a search Job, which only the submit paths elb-gate "
            "maps (chart value submitters) and the in-cluster service account "
            f"system:serviceaccount:{ns}:default may write here; user {user} is neither "
            "(see docs/security.md)\n"
        )

    def submitter(self, user: str, source: str) -> Submitter:
        return Submitter(self.cp, self.namespace, user, self.workdir, source=source)


@pytest.fixture(scope="module")
def policy(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Policy]:
    workdir = tmp_path_factory.mktemp("policy")
    namespace = control_plane.new_namespace("policy")
    with webhook(control_plane, workdir, namespace) as hook:
        hook.install.gate(namespace, open_to_all=True)  # everyone may create Jobs here
        with submitter_access(control_plane, namespace, {"submitterAccess.admissionPolicy": True}):
            wait_until(
                lambda: policy_refuses(control_plane, namespace), 60, "the policy in effect", 0.2
            )
            yield Policy(control_plane, hook, namespace, workdir)
    control_plane.admin.delete("namespaces", None, namespace)


def test_a_user_with_job_rights_outside_the_map_cannot_create_a_search_job(policy: Policy) -> None:
    code, _, stderr = policy.create(
        "mallory", finalizer(policy.namespace, elb.search_id(1), "by-mallory")
    )
    assert (code, stderr) == (1, policy.refused("mallory", "by-mallory", "finalizer"))
    assert policy.cp.admin.find("jobs", policy.namespace, "by-mallory") is None


@pytest.mark.parametrize("app", ["Finalizer", "fina1izer", "BLAST", "subrnit"])
def test_a_near_miss_from_outside_the_map_is_refused_by_the_policy_as_well(
    policy: Policy, app: str
) -> None:
    name = f"near-{app.lower()}"
    code, _, stderr = policy.create(
        "mallory", finalizer(policy.namespace, elb.search_id(2), name, app)
    )
    assert (code, stderr) == (1, policy.refused("mallory", name, app))


def test_an_ordinary_job_is_no_search_and_relabelling_it_into_one_is_refused(
    policy: Policy,
) -> None:
    code, stdout, stderr = policy.create(
        "mallory", finalizer(policy.namespace, elb.search_id(3), "web-job", "web")
    )
    assert (code, stdout) == (0, "job.batch/web-job created\n"), stderr
    relabel = policy.cp.kubectl(
        "mallory", "-n", policy.namespace, "label", "job", "web-job", "app=blast", "--overwrite"
    )
    assert relabel.returncode == 1
    assert relabel.stderr == policy.refused("mallory", "web-job", "blast", verb="")
    stored = policy.cp.admin.get("jobs", policy.namespace, "web-job")
    assert stored["metadata"]["labels"]["app"] == "web"


def test_another_member_of_a_team_is_outside_the_map_too(policy: Policy) -> None:
    code, _, stderr = policy.create(
        "carol", finalizer(policy.namespace, elb.search_id(4), "by-carol")
    )
    assert (code, stderr) == (1, policy.refused("carol", "by-carol", "finalizer"))


def test_the_mapped_submit_paths_pass_the_policy_and_meet_the_gates(policy: Policy) -> None:
    # Without the Lease the policy lets the mapped user through, and Gate A refuses.
    code, _, stderr = policy.create(
        "dashboard-apply", finalizer(policy.namespace, elb.search_id(5), "no-lease")
    )
    assert (
        code == 1
        and 'admission webhook "search-admission.elb-gate.io" denied the request: Gate A' in stderr
    )
    lease = policy.submitter("dashboard-lease", "dashboard").acquire()
    try:
        body = elb.ready(elb.finalizer(elb.search_id(5)), policy.namespace)
        applied = policy.submitter("dashboard-apply", "dashboard").apply(body)
        assert applied.ok, applied.stderr
    finally:
        lease.release()
        lease.close()


def test_the_in_cluster_account_joins_an_open_search(policy: Policy, tmp_path: Path) -> None:
    search = elb.search_id(6)
    alice = policy.submitter("alice", "openapi").acquire()
    try:
        assert alice.apply(elb.ready(elb.submit_jobs(search), policy.namespace)).ok
    finally:
        alice.release()
        alice.close()
    token = policy.cp.service_account_token(policy.namespace, "default")
    in_cluster = policy.cp.write_kubeconfig(
        tmp_path / "in-cluster.kubeconfig", "submit-jobs", token, policy.namespace
    )
    batch = job(policy.namespace, elb.blast_batch(search, 0))
    code, stdout, stderr = policy.create("admin", batch, kubeconfig=in_cluster)
    assert code == 0 and stdout.endswith(" created\n"), stderr


def test_the_policy_holds_while_the_webhook_is_down_and_after_it_is_switched_off(
    policy: Policy,
) -> None:
    """Last in this module: it stops the module's webhook."""
    policy.hook.kill()  # both replicas gone; the configurations stay (failurePolicy Fail)
    code, _, stderr = policy.create(
        "mallory", finalizer(policy.namespace, elb.search_id(7), "while-down")
    )
    assert (code, stderr) == (1, policy.refused("mallory", "while-down", "finalizer"))
    code, _, stderr = policy.create(
        "alice", finalizer(policy.namespace, elb.search_id(7), "mapped-while-down")
    )
    assert code == 1 and 'failed calling webhook "search-admission.elb-gate.io"' in stderr
    policy.hook.unregister()  # the emergency off switch: no webhook judges anything now
    code, _, stderr = policy.create(
        "mallory", finalizer(policy.namespace, elb.search_id(8), "switched-off")
    )
    assert (code, stderr) == (1, policy.refused("mallory", "switched-off", "finalizer"))
    code, stdout, stderr = policy.create(
        "alice", finalizer(policy.namespace, elb.search_id(8), "mapped-switched-off")
    )
    assert (code, stdout) == (0, "job.batch/mapped-switched-off created\n"), stderr
