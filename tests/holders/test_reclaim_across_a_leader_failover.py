"""A controller leader killed in the middle of a reclaim: the standby takes over once the
leader Lease runs out and reclaims the holder, exactly once (the dead leader's PATCH
never lands). How long that takes (about the leader Lease, 15 s, plus the reclaim) is
not asserted: a busy machine takes longer, and the outcome is the same."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed import holders
from testbed.controller_process import ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.holders import AT_DEFAULTS, Reclaim, Stage
from testbed.install import Installation
from testbed.webhook_process import WebhookProcess

REPLICAS = ("controller-a", "controller-b")


@pytest.fixture(scope="module")
def stage(
    control_plane: ControlPlane, hook: WebhookProcess, proxy: FaultProxy
) -> Iterator[tuple[Stage, str]]:
    ns = hook.install.gate(control_plane.new_namespace("failover"))
    install = Installation.on(control_plane)
    holders.free_leader_lease(control_plane)
    # Both replicas at the default settings; the first reaches the API through the
    # proxy, so its reclaim can be held in flight.
    token = install.identity("controller", REPLICAS[0]).token
    first = ControllerProcess.start(
        control_plane,
        name=REPLICAS[0],
        namespaces=[ns],
        env={"KUBECONFIG": proxy.kubeconfig(token, REPLICAS[0])},
        **AT_DEFAULTS,
    )
    try:
        first.wait_until(first.is_leader, 60, "the first replica leads")
        second = ControllerProcess.start(
            control_plane, name=REPLICAS[1], namespaces=[ns], **AT_DEFAULTS
        )
        try:
            second.wait_until(second.ready, 60, "the standby is synced")
            yield holders.Stage.on(control_plane, [first, second]), ns
        finally:
            second.stop()
    finally:
        first.stop()


def test_a_leader_killed_mid_reclaim_is_replaced_and_the_standby_reclaims_the_holder_once(
    control_plane: ControlPlane,
    stage: tuple[Stage, str],
    proxy: FaultProxy,
    record: list[Reclaim],
) -> None:
    on, ns = stage
    leader, standby = on.controllers
    assert leader.is_leader() and not standby.is_leader()
    holder = holders.acquire(control_plane, holders.submitter_pod(control_plane, ns))
    try:
        on.noticed(holder)
        # The leader's reclaim PATCH is held in flight; it dies before it lands.
        held = proxy.add(method="PATCH", resource="leases", namespace=ns, delay=120.0, count=1)
        asked = holders.now()
        control_plane.admin.delete("pods", ns, holder.identity.pod, grace_seconds=0)
        leader.wait_until(lambda: held.fired == 1, 60, "the leader's reclaim is in flight")
        leader.kill()
        reclaim = on.reclaim_of(holder, "leader_failover", asked)
        record.append(reclaim)
        assert reclaim.by == standby.name
        assert reclaim.evidence in ("pod_terminating", "pod_deleted")
        assert len(on.audit.clears_of(holder)) == 1
    finally:
        holder.close()
