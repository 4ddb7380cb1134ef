"""The threat model's actors on the real control plane, in a gated namespace where
every user may write Jobs and Leases (no submitterAccess): what the gates guarantee
against a careless user and a hostile one, and — proven as well, so docs/security.md
can say it plainly — what they do not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from elbgate.names import HOLDER_USER_ANNOTATION
from testbed import elastic_blast as elb
from testbed.api import ApiError, JsonObj
from testbed.controlplane import ControlPlane
from testbed.install import CENSUS_FENCE_JOB
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.graph.submitter import Submitter
from tests.security.conftest import finalizer, job, webhook

DENIED = 'admission webhook "search-admission.elb-gate.io" denied the request: '
GUARD = 'admission webhook "lease-guard.elb-gate.io" denied the request: '


@pytest.fixture(scope="module")
def hook(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    workdir = tmp_path_factory.mktemp("actors")
    with webhook(control_plane, workdir, "actors") as process:
        yield process


@dataclass
class Scene:
    cp: ControlPlane
    namespace: str
    workdir: Path

    @property
    def lease_name(self) -> str:
        return f"elb-blast-submit-{self.namespace}"

    def create(self, user: str, body: str) -> tuple[int, str, str]:
        done = self.cp.kubectl(user, "-n", self.namespace, "create", "-f", "-", input=body)
        return done.returncode, done.stdout, done.stderr

    def submitter(self, user: str = "alice", source: str = "openapi") -> Submitter:
        return Submitter(self.cp, self.namespace, user, self.workdir, source=source)

    def lease(self) -> JsonObj:
        return self.cp.admin.get("leases", self.namespace, self.lease_name)

    def write_lease(self, user: str, change: dict[str, Any]) -> JsonObj:
        """``user`` PUTs the stored Lease with ``change`` merged into its spec."""
        lease = self.lease()
        lease["spec"].update(change)
        return self.cp.api(user).update(lease)

    def open_search(self, search: str) -> None:
        """alice opens ``search`` under the Lease (its in-cluster submit Job), then releases."""
        alice = self.submitter().acquire()
        try:
            applied = alice.apply(elb.ready(elb.submit_jobs(search), self.namespace))
            assert applied.ok, applied.stderr
        finally:
            alice.release()
            alice.close()


@pytest.fixture
def scene(
    control_plane: ControlPlane,
    hook: WebhookProcess,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Scene]:
    prefix = request.node.originalname.removeprefix("test_").replace("_", "-")[:18].rstrip("-")
    namespace = hook.install.gate(control_plane.new_namespace(prefix))
    yield Scene(control_plane, namespace, tmp_path)
    lease = control_plane.admin.find("leases", namespace, f"elb-blast-submit-{namespace}")
    if lease and lease["spec"].get("holderIdentity"):  # a live submit Lease is never deleted
        lease["spec"]["holderIdentity"] = None
        try:
            control_plane.api(lease["metadata"]["annotations"][HOLDER_USER_ANNOTATION]).update(
                lease
            )
        except (ApiError, KeyError):
            pass
    control_plane.admin.delete("namespaces", None, namespace)


# -- a careless user: clear refusals that say what to do ---------------------------------------


def test_a_submit_without_the_lease_is_refused_saying_how_to_get_it(scene: Scene) -> None:
    code, _, stderr = scene.create("alice", finalizer(scene.namespace, elb.search_id(1)))
    assert code == 1
    assert stderr.startswith(
        'Error from server (Forbidden): error when creating "STDIN": ' + DENIED + "Gate A: "
    )
    assert (
        f"Fix: acquire Lease {scene.namespace}/{scene.lease_name} before running elastic-blast submit"
        in stderr
    )


def test_a_look_alike_app_label_is_refused_naming_the_exact_value(scene: Scene) -> None:
    holder = scene.submitter().acquire()
    try:
        code, _, stderr = scene.create(
            "alice", finalizer(scene.namespace, elb.search_id(2), "typo", "Finalizer")
        )
    finally:
        holder.release()
        holder.close()
    assert code == 1
    assert stderr.startswith('The request is invalid: error when creating "STDIN": ' + DENIED)
    assert "carries app=Finalizer: did you mean app=finalizer?" in stderr


def test_an_id_that_differs_from_an_active_search_only_in_case_is_refused(scene: Scene) -> None:
    search = elb.search_id(0xABC)
    scene.open_search(search)
    holder = scene.submitter().acquire()
    try:
        code, _, stderr = scene.create(
            "alice", job(scene.namespace, elb.blast_batch(search.upper(), 0), "twin")
        )
    finally:
        holder.release()
        holder.close()
    assert code == 1
    assert (
        f"differs from active search {search} only in case or look-alike characters: did you mean elb-job-id={search}?"
        in stderr
    )


# -- a hostile user with Lease rights: the guard keys on who the API server says wrote ----------


def test_a_live_lease_cannot_be_taken_over_released_or_deleted_by_another_user(
    scene: Scene,
) -> None:
    alice = scene.submitter().acquire()
    try:
        holder = scene.lease()["spec"]["holderIdentity"]
        with pytest.raises(ApiError) as takeover:
            scene.write_lease("mallory", {"holderIdentity": "mallory-1"})
        assert takeover.value.status == 409 and GUARD + "Lease guard" in takeover.value.message
        with pytest.raises(ApiError) as release:
            scene.write_lease("mallory", {"holderIdentity": None})
        assert "user mallory is not its holder and may not release it" in release.value.message
        with pytest.raises(ApiError) as delete:
            scene.cp.api("mallory").delete("leases", scene.namespace, scene.lease_name)
        assert "a live submit Lease is never deleted" in delete.value.message
        assert scene.lease()["spec"]["holderIdentity"] == holder
    finally:
        alice.release()
        alice.close()


def test_the_stamp_records_who_wrote_and_the_webhooks_clock_not_what_the_client_claims(
    scene: Scene,
) -> None:
    forged = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": scene.lease_name,
            "namespace": scene.namespace,
            "annotations": {HOLDER_USER_ANNOTATION: "dashboard-lease"},
        },
        "spec": {
            "holderIdentity": "mallory-1",
            "leaseDurationSeconds": 900,
            "renewTime": "2020-01-01T00:00:00.000000Z",
            "acquireTime": "2020-01-01T00:00:00.000000Z",
        },
    }
    stored = scene.cp.api("mallory").create(forged)
    assert stored["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == "mallory"
    assert not stored["spec"]["renewTime"].startswith("2020-")
    assert not stored["spec"]["acquireTime"].startswith("2020-")
    # So the Lease is live on elb-gate's clock, and alice waits like everyone else.
    assert not scene.submitter().try_acquire()


def test_a_submit_paths_holder_prefix_cannot_be_borrowed(scene: Scene) -> None:
    with pytest.raises(ApiError) as refused:
        scene.cp.api("mallory").create(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": scene.lease_name, "namespace": scene.namespace},
                "spec": {"holderIdentity": "dashboard-0b3f", "leaseDurationSeconds": 900},
            }
        )
    assert refused.value.status == 403
    assert (
        "carries the holderPrefix 'dashboard-' of submitter `dashboard`, and user mallory is not one of its users"
        in refused.value.message
    )


def test_not_guaranteed_anyone_with_lease_rights_may_hold_a_free_lease_until_it_expires(
    scene: Scene,
) -> None:
    mallory = scene.submitter("mallory", "mallory")
    assert mallory.try_acquire()
    try:
        assert not scene.submitter().try_acquire()  # the submit paths wait out mallory's TTL
    finally:
        mallory.release()
        mallory.close()


def test_an_operator_clears_a_live_lease_by_acting_as_the_controller(scene: Scene) -> None:
    mallory = scene.submitter("mallory", "mallory")
    assert mallory.try_acquire()
    mallory.close()  # and gone: only its TTL would free the Lease
    patch = json.dumps({"spec": {"holderIdentity": None}})
    done = scene.cp.kubectl(
        "admin",
        "-n",
        scene.namespace,
        "patch",
        "lease",
        scene.lease_name,
        "--type=merge",
        "-p",
        patch,
        # The controller's username, which the guard lets release any holder, with the
        # operator's own rights (the controller's RBAC may patch a Lease, not get it).
        "--as",
        "system:serviceaccount:elb-system:elb-gate-controller",
        "--as-group",
        "system:masters",
    )
    assert (done.returncode, done.stdout) == (
        0,
        f"lease.coordination.k8s.io/{scene.lease_name} patched\n",
    ), done.stderr
    alice = scene.submitter()
    assert alice.try_acquire()
    alice.close()


# -- a hostile user with Job rights: what only the Lease stops, and what nothing here stops ------


def test_without_the_lease_no_one_opens_a_search(scene: Scene) -> None:
    code, _, stderr = scene.create(
        "mallory", job(scene.namespace, elb.blast_batch(elb.search_id(5), 0))
    )
    assert (
        code == 1
        and DENIED + "Gate A: Lease" in stderr
        and "so user mallory does not hold it" in stderr
    )


def test_not_guaranteed_a_job_copying_an_active_search_id_joins_it_without_the_lease(
    scene: Scene,
) -> None:
    search = elb.search_id(6)
    scene.open_search(search)
    body = elb.ready(elb.blast_batch(search, 7), scene.namespace)
    code, stdout, stderr = scene.create("mallory", json.dumps(body))
    assert (code, stdout) == (0, f"job.batch/{body['metadata']['name']} created\n"), stderr


def test_not_guaranteed_a_job_without_a_gated_app_label_is_not_judged(scene: Scene) -> None:
    code, stdout, stderr = scene.create(
        "mallory", finalizer(scene.namespace, elb.search_id(8), "unlabelled", "blast-runner")
    )
    assert (code, stdout) == (0, "job.batch/unlabelled created\n"), stderr


def test_the_webhook_itself_may_write_only_its_admission_record_in_a_gated_namespace(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    # A namespace where only elb-gate's own RoleBindings grant anything.
    namespace = hook.install.gate(control_plane.new_namespace("webhook-rights"), open_to_all=False)
    webhook_user = "system:serviceaccount:elb-system:elb-gate-webhook"

    def can(verb: str, resource: str) -> str:
        done = control_plane.kubectl(
            "admin", "auth", "can-i", verb, resource, "-n", namespace, "--as", webhook_user
        )
        return str(done.stdout.strip())

    try:
        wait_until(  # the census; the authorizer reads the RoleBinding from its informer
            lambda: can("list", "jobs") == "yes", 60, "the webhook's RoleBinding in effect", 0.2
        )
        for verb, resource in [
            ("create", "jobs"),
            ("delete", "jobs"),
            ("update", "leases"),
            ("patch", f"leases/elb-blast-submit-{namespace}"),
            ("delete", "leases/elb-gate-admission"),
            ("create", "pods"),
            ("update", "configmaps/elb-blast-liveness"),
            ("delete", "configmaps/elb-gate-admissions"),
            ("patch", "configmaps/elb-gate-admissions"),
            ("patch", "jobs/elb-finalizer-0a1b2c3d"),
            ("update", f"jobs/{CENSUS_FENCE_JOB}"),
        ]:
            assert can(verb, resource) == "no", (verb, resource)
        # The census fence: one annotation rewritten by a merge patch, that Job only.
        assert can("patch", f"jobs/{CENSUS_FENCE_JOB}") == "yes"
        assert can("update", "configmaps/elb-gate-admissions") == "yes"
        # The readiness key: created once, then renewed by a patch of that Lease only.
        assert can("patch", "leases/elb-gate-admission") == "yes"
        assert can("create", "leases") == "yes"
        assert can("get", "configmaps/elb-gate-admissions") == "yes"
    finally:
        control_plane.admin.delete("namespaces", None, namespace)
