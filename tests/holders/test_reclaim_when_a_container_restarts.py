"""A holder pod that lives on while the process holding the Lease crashed and restarted:
reclaimed when that process is provably gone, never for a sidecar's restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from elbgate.names import HOLDER_CONTAINER_ANNOTATION, lease_name
from testbed import holders
from testbed.controlplane import ControlPlane
from testbed.holders import HOLDER_CONTAINER, SIDECAR, Reclaim, Stage
from testbed.webhook_process import WebhookProcess

NAMESPACES = ("restarted", "sidecar", "unnamed-holder", "named-holder")


@pytest.fixture(scope="module")
def stage(
    control_plane: ControlPlane, hook: WebhookProcess
) -> Iterator[tuple[Stage, dict[str, str]]]:
    namespaces = {k: hook.install.gate(control_plane.new_namespace(k)) for k in NAMESPACES}
    with holders.controllers(control_plane, list(namespaces.values())) as s:
        yield s, namespaces


def test_a_holder_whose_container_crashed_and_restarted_is_reclaimed(
    stage: tuple[Stage, dict[str, str]], record: list[Reclaim]
) -> None:
    on, namespaces = stage
    reclaim = holders.container_restarted(on, namespaces["restarted"])
    record.append(reclaim)
    assert reclaim.evidence == "container_restarted"


@pytest.mark.parametrize(
    ("key", "annotations", "crashed"),
    [
        ("sidecar", {HOLDER_CONTAINER_ANNOTATION: HOLDER_CONTAINER}, SIDECAR),
        ("sidecar", {}, SIDECAR),
        ("unnamed-holder", {}, HOLDER_CONTAINER),
    ],
    ids=["sidecar-of-a-named-holder", "sidecar-of-an-unnamed-holder", "unnamed-holder"],
)
def test_a_restart_beside_a_container_still_running_its_first_instance_is_not_a_reclaim(
    control_plane: ControlPlane,
    stage: tuple[Stage, dict[str, str]],
    key: str,
    annotations: dict[str, str],
    crashed: str,
) -> None:
    # Without elb-gate.io/holder-container every container may hold the Lease: while one
    # still runs the instance that ran at the last renewal, the holder may be alive.
    on, namespaces = stage
    ns = namespaces[key]
    identity = holders.submitter_pod(
        control_plane, ns, containers=(HOLDER_CONTAINER, SIDECAR), annotations=annotations
    )
    holder = holders.acquire(control_plane, identity)
    try:
        on.noticed(holder)
        holders.past_the_second_of(holder.renewed[-1])
        holders.crash(control_plane, identity, [crashed])
        pod = holders.restarted(control_plane, identity, crashed)
        others = [c for c in (HOLDER_CONTAINER, SIDECAR) if c != crashed]
        assert holders.container_status(pod, others[0])["restartCount"] == 0
        on.settle(ns)
        lease = control_plane.admin.get("leases", ns, lease_name(ns))
        assert lease["spec"]["holderIdentity"] == holder.name
        assert on.audit.clears_of(holder) == []
        assert holder.lease.release()  # still its own to release
    finally:
        holder.close()


def test_the_named_holder_container_restarting_alone_is_reclaimed(
    stage: tuple[Stage, dict[str, str]], record: list[Reclaim]
) -> None:
    on, namespaces = stage
    reclaim = holders.holder_container_restarted(on, namespaces["named-holder"])
    record.append(reclaim)
    assert reclaim.evidence == "container_restarted"
