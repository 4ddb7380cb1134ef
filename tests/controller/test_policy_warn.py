"""With ELB_GATE_ORPHAN_POLICY=warn an orphan is flagged but never deleted, even with a
zero delete grace, and a finalizer whose batch work appears after all is un-flagged."""

from __future__ import annotations

from elbgate.names import ORPHANED_SINCE_ANNOTATION
from testbed import elastic_blast as elb
from testbed.controller_process import ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.holders import free_leader_lease, settle
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.controller.observed import events, job_annotations
from tests.graph.submitter import Submitter


def test_policy_warn_marks_and_warns_but_never_deletes(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    cp = control_plane
    ns = hook.install.gate(cp.new_namespace("warned"))
    env = {
        "ELB_GATE_ORPHAN_POLICY": "warn",
        "BLAST_FINALIZER_GRACE_SECONDS": "0",
        "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "0",
    }
    free_leader_lease(cp)
    with ControllerProcess.start(cp, name="ctl-w", namespaces=[ns], env=env) as ctl:
        submitter = Submitter(cp, ns, "alice", source="cli")
        job_id = elb.search_id()
        with submitter.holding():
            (fin,) = submitter.create(elb.ready(elb.finalizer(job_id), ns))
        name = fin["metadata"]["name"]

        def mark() -> str | None:
            return job_annotations(cp, ns, name).get(ORPHANED_SINCE_ANNOTATION)

        wait_until(lambda: mark() is not None, 30, "marked")
        wait_until(lambda: events(cp, ns, "OrphanedFinalizer"), 30, "warned")
        settle(cp, ctl, ns, rounds=3)
        assert cp.admin.find("jobs", ns, name) is not None
        assert not events(cp, ns, "OrphanedFinalizerDeleted")
        assert "will not be deleted" in events(cp, ns, "OrphanedFinalizer")[0]["message"]
        assert ctl.metric("elb_gate_orphaned_finalizers", {"namespace": ns}) == 1
        # Its batch work appears after all: no longer an orphan, so the mark goes.
        with submitter.holding():
            submitter.create(elb.ready(elb.blast_batch(job_id, 0), ns))
        wait_until(lambda: mark() is None, 30, "un-marked")
        ctl.wait_until(
            lambda: ctl.metric("elb_gate_orphaned_finalizers", {"namespace": ns}) == 0,
            30,
            "gauge back to 0",
        )
