"""SIGTERM stops a controller cleanly and hands leadership over at once."""

from __future__ import annotations

from datetime import timedelta

from testbed.controller_process import ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.holders import ControllerTiming, free_leader_lease, utc


def test_a_terminated_leader_releases_its_lease_so_the_other_leads_without_waiting(
    control_plane: ControlPlane,
) -> None:
    # A 60 s leader Lease: the follower can only acquire it before ctl-1's last renewal
    # + 60 s if the Lease was released (the Lease's own times, not the test's waiting).
    cp = control_plane
    ns = cp.new_namespace("calm")
    timing: ControllerTiming = {
        "resync_seconds": 1.0,
        "leader_lease_seconds": 60.0,
        "leader_renew_seconds": 0.5,
    }
    free_leader_lease(cp)
    with ControllerProcess.start(cp, name="ctl-1", namespaces=[ns], **timing) as first:
        first.wait_until(first.is_leader, 30, "ctl-1 leads")
        with ControllerProcess.start(cp, name="ctl-2", namespaces=[ns], **timing) as second:
            second.wait_until(second.ready, 30, "ctl-2 synced")
            assert not second.is_leader()
            held = cp.admin.get("leases", "elb-system", "elb-gate-controller")["spec"]
            assert first.terminate() == 0
            assert first.logs("released leader Lease")
            second.wait_until(second.is_leader, 120, "ctl-2 leads after the release")
            lease = cp.admin.get("leases", "elb-system", "elb-gate-controller")
            assert lease["spec"]["holderIdentity"].startswith("ctl-2_")
            taken = utc(lease["spec"]["acquireTime"])
            assert taken < utc(held["renewTime"]) + timedelta(seconds=60)
