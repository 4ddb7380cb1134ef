"""Integration: SIGTERM stops a controller cleanly and hands leadership over at once."""

from __future__ import annotations

from tests.kube_emulator import Emulator
from tests.support.controller_process import ControllerProcess, wait_until


def test_a_terminated_leader_releases_its_lease_so_the_other_leads_without_waiting(
    emulator: Emulator,
) -> None:
    # A 60 s leader Lease: the follower can only lead this soon if the Lease was released.
    timing = {"leader_lease_seconds": 60.0, "leader_renew_seconds": 0.5}
    with ControllerProcess.start(emulator, name="ctl-1", namespaces=["calm"], **timing) as first:
        wait_until(first.is_leader, "ctl-1 leads", 30, first)
        with ControllerProcess.start(
            emulator, name="ctl-2", namespaces=["calm"], **timing
        ) as second:
            wait_until(second.ready, "ctl-2 synced", 30, second)
            assert not second.is_leader()
            assert first.terminate() == 0
            assert first.logs("released leader Lease")
            wait_until(second.is_leader, "ctl-2 leads after the release", 15, second)
            lease = emulator.get("leases", "elb-system", "elb-gate-controller")
            assert lease["spec"]["holderIdentity"].startswith("ctl-2_")
