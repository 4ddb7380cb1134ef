"""The shipped RBAC is what the webhook and the controller need, on a real API server:
take away one verb either uses and the failure is the one it causes — a real 403,
logged and counted, nothing crashes, nothing is admitted — and giving it back heals it.

(tests/install/test_rbac.py checks the same grants statically, against the calls the
code makes; this shows them enforced.)

The fast tier is enough: a 403 is the API server's authorizer, the same for a host
process and a Pod holding the same ServiceAccount's token.
"""

from __future__ import annotations

import pytest

from testbed import elastic_blast as elb
from testbed.api import ApiError
from testbed.controller_process import CONTROLLER_SA, ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.holders import free_leader_lease
from testbed.install import WEBHOOK_SA
from testbed.rbac import without_verb
from testbed.waiting import wait_until
from testbed.webhook_process import SHORT_LEASES, WebhookProcess
from tests.controller.observed import events, holder
from tests.graph.submitter import Submitter


@pytest.fixture(scope="module")
def webhook_env() -> dict[str, str]:
    return SHORT_LEASES  # a 2 s Lease expires 2 s after it was taken (both servers agree)


def test_a_controller_without_patch_on_leases_logs_and_counts_the_403_and_recovers(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    cp = control_plane
    ns = hook.install.gate(cp.new_namespace("rbac-controller"))
    free_leader_lease(cp)
    with ControllerProcess.start(cp, name="ctl-rbac", namespaces=[ns], env=SHORT_LEASES) as ctl:
        ctl.wait_until(lambda: ctl.is_leader() and ctl.ready(), 60, "leading and synced")
        with without_verb(
            cp,
            "elb-gate-controller",
            "leases",
            "patch",
            service_account=CONTROLLER_SA,
            namespace=ns,
        ):
            lease = (
                Submitter(cp, ns, "alice", source="cli", ttl_seconds=2).acquire().lease
            )  # expires unrenewed
            lease.close()
            refused = ctl.wait_for_log(
                lambda r: r.get("msg") == "write refused" and r.get("action") == "ReleaseLease",
                60,
            )
            assert refused["code"] == 403 and refused["reason"] == "Forbidden"
            assert 'cannot patch resource "leases"' in refused["detail"]
            errors = ctl.metric(
                "elb_gate_api_errors_total",
                {"component": "controller", "verb": "patch", "resource": "leases"},
            )
            assert errors is not None and errors >= 1
            assert holder(cp, ns) == lease.holder  # nothing written
            assert ctl.alive and ctl.ready() and ctl.is_leader()
        # The shipped role is back: the next attempt goes through.
        wait_until(lambda: holder(cp, ns) == "", 30, "the expired Lease reclaimed")
        wait_until(lambda: events(cp, ns, "LeaseExpiredReclaimed"), 30, "its Event")
        assert ctl.alive


def test_a_webhook_without_list_on_jobs_fails_closed_with_503_and_recovers(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    cp = control_plane
    ns = hook.install.gate(cp.new_namespace("rbac-webhook"))
    submitter = Submitter(cp, ns, "alice", source="cli")
    job_id = elb.search_id()
    with submitter.holding():
        with without_verb(
            cp, "elb-gate-webhook", "jobs", "list", service_account=WEBHOOK_SA, namespace=ns
        ):
            # Gate B must count the active searches (a LIST of Jobs) and cannot.
            with pytest.raises(ApiError) as refused:
                submitter.create(elb.ready(elb.blast_batch(job_id, 0), ns))
            assert refused.value.status == 503
            assert 'admission webhook "search-admission.elb-gate.io" denied the request' in (
                refused.value.message
            )
            assert "could not verify" in refused.value.message
            assert "fail-closed" in refused.value.message
            assert (
                cp.admin.find(
                    "jobs", ns, elb.ready(elb.blast_batch(job_id, 0), ns)["metadata"]["name"]
                )
                is None
            )
            assert hook.process is not None and hook.process.poll() is None
        (created,) = submitter.create(elb.ready(elb.blast_batch(job_id, 0), ns))
    assert created["metadata"]["labels"]["elb-job-id"] == job_id
