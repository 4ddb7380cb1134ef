"""A deadline that no watch event announces is acted on when it falls due, not at the next
resync: the real controller process, its resync an hour away, on the real control plane.

Each plan says when to look again (a lone finalizer's grace, an orphan's delete grace, the
submit Lease's expiry); the reconciler sets a timer for it. Whatever these tests see
happen within their waits happened on such a timer (or on an event), never on the resync.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from elbgate.lease import parse_microtime
from elbgate.names import ORPHANED_SINCE_ANNOTATION
from testbed import elastic_blast as elb
from testbed.clients import OpenApiLeaseClient
from testbed.controller_process import ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.holders import free_leader_lease
from testbed.waiting import wait_until
from testbed.webhook_process import SHORT_LEASES, WebhookProcess
from tests.controller.observed import events, holder, job_annotations
from tests.graph.submitter import Submitter

AN_HOUR = 3600.0
GRACE_SECONDS = 8
"""Long enough for the Job controller's status writes after the create to be over, so
the grace ends with nothing else happening in the namespace."""
DELETE_AFTER_SECONDS = 4


def at(value: object) -> datetime:
    moment = parse_microtime(value)
    assert isinstance(moment, datetime), value
    return moment


def test_a_lone_finalizers_grace_and_then_its_delete_grace_are_acted_on_when_due(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    cp = control_plane
    ns = hook.install.gate(cp.new_namespace("due"))
    env = {
        "ELB_GATE_ORPHAN_POLICY": "delete",
        "BLAST_FINALIZER_GRACE_SECONDS": str(GRACE_SECONDS),
        "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": str(DELETE_AFTER_SECONDS),
    }
    free_leader_lease(cp)
    with ControllerProcess.start(
        cp, name="ctl-due", namespaces=[ns], env=env, resync_seconds=AN_HOUR
    ) as ctl:
        ctl.wait_until(ctl.is_leader, 30, "leads")
        submitter = Submitter(cp, ns, "alice", source="cli")
        with submitter.holding():
            (fin,) = submitter.create(elb.ready(elb.finalizer(elb.search_id()), ns))
        name = fin["metadata"]["name"]
        created = at(fin["metadata"]["creationTimestamp"])

        def mark() -> str | None:
            return job_annotations(cp, ns, name).get(ORPHANED_SINCE_ANNOTATION)

        marked = at(wait_until(mark, 60, "the orphan marked once its grace ended"))
        # Not before the grace (the API server stamps creation to the second).
        assert marked >= created + timedelta(seconds=GRACE_SECONDS)
        wait_until(lambda: cp.admin.find("jobs", ns, name) is None, 60, "the orphan deleted")
        (deleted,) = wait_until(lambda: events(cp, ns, "OrphanedFinalizerDeleted"), 30, "its Event")
        when = deleted.get("lastTimestamp") or deleted.get("eventTime")
        assert at(when) >= marked + timedelta(seconds=DELETE_AFTER_SECONDS) - timedelta(
            seconds=1
        )  # an Event's lastTimestamp has whole seconds


def test_an_unrenewed_lease_is_cleared_at_its_expiry(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    cp = control_plane
    ns = hook.install.gate(cp.new_namespace("expiry"))
    free_leader_lease(cp)
    with ControllerProcess.start(
        cp, name="ctl-expiry", namespaces=[ns], env=SHORT_LEASES, resync_seconds=AN_HOUR
    ) as ctl:
        ctl.wait_until(ctl.is_leader, 30, "leads")
        gone = OpenApiLeaseClient.on(cp, "carol", ns, ttl=3)
        assert gone.acquire() == "acquired"  # and never renewed: its process is gone
        stored = cp.admin.get("leases", ns, f"elb-blast-submit-{ns}")
        expiry = at(stored["spec"]["renewTime"]) + timedelta(seconds=3)
        wait_until(lambda: holder(cp, ns) == "", 60, "the expired holder cleared")
        # The log line follows the write it reports.
        cleared = ctl.wait_for_log(lambda r: r.get("msg") == "submit Lease reclaimed", 30)
        assert cleared["reason"] == "expired"
        assert at(cleared["ts"]) >= expiry
