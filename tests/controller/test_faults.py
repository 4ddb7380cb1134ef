"""Faults between the controller and the real API server — errors, dropped and expired
watches, CAS conflicts — never crash it nor make it act on stale data; a conflict means
re-observe, never overwrite. The faults come from a proxy in front of the API server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest

from controller.actions import ReleaseLease
from controller.apply import Outcome
from elbgate.kube.api import KubeApi
from elbgate.names import ORPHANED_SINCE_ANNOTATION, lease_name
from testbed import elastic_blast as elb
from testbed import holders
from testbed.api import JsonObj
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.waiting import wait_until_async
from tests.controller.conftest import controller_settings, running
from tests.controller.observed import events, holder, job_annotations, liveness
from tests.graph.submitter import Submitter


@pytest.fixture
def expired(control_plane: ControlPlane, ns: str) -> Iterator[JsonObj]:
    """A submit Lease of 2 s that alice never renews: expired 2 s after it was taken."""
    lease = Submitter(control_plane, ns, "alice", source="cli", ttl_seconds=2).acquire().lease
    try:
        assert lease._known is not None
        yield lease._known
    finally:
        lease.close()


def lone_finalizer(cp: ControlPlane, ns: str) -> str:
    """A finalizer created under the Lease whose batch work never appears (an orphan)."""
    submitter = Submitter(cp, ns, "alice", source="cli")
    with submitter.holding():
        (fin,) = submitter.create(elb.ready(elb.finalizer(elb.search_id()), ns))
    return str(fin["metadata"]["name"])


def marked(cp: ControlPlane, ns: str, name: str) -> bool:
    return ORPHANED_SINCE_ANNOTATION in job_annotations(cp, ns, name)


async def test_a_failing_initial_list_leaves_the_namespace_alone_until_it_succeeds(
    control_plane: ControlPlane,
    ns: str,
    expired: JsonObj,
    fault_proxy: FaultProxy,
    controller_api: KubeApi,
) -> None:
    cp = control_plane
    fault = fault_proxy.add(method="GET", resource="jobs", status=500, count=None)
    async with running(controller_api, controller_settings(ns)) as ctl:
        await wait_until_async(lambda: fault.fired >= 3 and ctl.leader.may_act(), 30, "LIST errors")
        # Leader, Lease and ConfigMap watches are fine, but the namespace is not synced.
        assert not ctl.cache.synced(ns) and not ctl.health.ready()
        assert holder(cp, ns) != ""
        assert liveness(cp, ns) == {}
        reported = cast(dict[str, dict[str, str]], ctl.reconciler.liveness_json(True)["namespaces"])
        assert reported[ns]["state"] == "unknown"
        fault_proxy.clear()
        await wait_until_async(lambda: holder(cp, ns) == "", 30, "reclaimed once the LIST succeeds")
        assert ctl.health.ready()


async def test_an_expired_watch_relists_and_sees_what_happened_meanwhile(
    control_plane: ControlPlane, ns: str, fault_proxy: FaultProxy, controller_api: KubeApi
) -> None:
    cp = control_plane
    # Only the search apps are liveness apps here, so the one Jobs watch is the search
    # Jobs' (the dashboard's own apps get a watch of their own).
    settings = controller_settings(ns, liveness_apps=("blast", "finalizer", "setup", "submit"))
    async with running(controller_api, settings, watch_timeout_seconds=1) as ctl:
        await wait_until_async(
            lambda: ctl.cache.synced(ns) and ctl.leader.may_act(), 30, "synced leader"
        )
        # The next Jobs watch waits a moment, then its history is gone (410): meanwhile a
        # finalizer appears; the relist must find it.
        fault = fault_proxy.add(
            method="GET", resource="jobs", watch=True, delay=3.0, watch_gone=True, count=1
        )
        await wait_until_async(lambda: fault.fired == 1, 30, "the re-watch is waiting")
        name = lone_finalizer(cp, ns)
        await wait_until_async(
            lambda: marked(cp, ns, name), 30, "the orphan made meanwhile is marked"
        )
        restarts = ctl.metrics.registry.get_sample_value(
            "elb_gate_watch_restarts_total", {"resource": "jobs"}
        )
        assert restarts is not None and restarts >= 1


async def test_dropped_watch_connections_do_not_crash_the_controller(
    control_plane: ControlPlane, ns: str, fault_proxy: FaultProxy, controller_api: KubeApi
) -> None:
    cp = control_plane
    fault_proxy.add(method="GET", resource="leases", watch=True, drop=True, count=3)
    async with running(controller_api, controller_settings(ns)) as ctl:
        await wait_until_async(
            lambda: ctl.cache.synced(ns) and ctl.leader.may_act(), 30, "synced leader"
        )
        lease = Submitter(cp, ns, "alice", source="cli", ttl_seconds=2).acquire().lease
        lease.close()
        await wait_until_async(lambda: holder(cp, ns) == "", 30, "the expired Lease is reclaimed")
        await wait_until_async(lambda: events(cp, ns, "LeaseExpiredReclaimed"), 30, "the Event")
        assert len(events(cp, ns, "LeaseExpiredReclaimed")) == 1


async def test_failed_writes_are_retried_and_evented_once(
    control_plane: ControlPlane,
    ns: str,
    expired: JsonObj,
    fault_proxy: FaultProxy,
    controller_api: KubeApi,
) -> None:
    cp = control_plane
    fault = fault_proxy.add(method="PATCH", resource="leases", namespace=ns, status=500, count=2)
    async with running(controller_api, controller_settings(ns)) as ctl:
        await wait_until_async(lambda: holder(cp, ns) == "", 30, "reclaimed after the errors")
        assert fault.fired == 2
        await wait_until_async(lambda: events(cp, ns, "LeaseExpiredReclaimed"), 30, "the Event")
        assert len(events(cp, ns, "LeaseExpiredReclaimed")) == 1
        errors = ctl.metrics.registry.get_sample_value(
            "elb_gate_api_errors_total",
            {"component": "controller", "verb": "patch", "resource": "leases"},
        )
        assert errors == 2


async def test_a_cas_conflict_is_reported_and_never_overwrites(
    control_plane: ControlPlane, ns: str, expired: JsonObj, controller_api: KubeApi
) -> None:
    cp = control_plane
    settings = controller_settings(ns, resync_seconds=60)
    async with running(controller_api, settings) as ctl:
        await wait_until_async(lambda: holder(cp, ns) == "", 30, "first reclaim")
        # Bob takes the Lease; a plan made on the old version must not apply.
        taken = Submitter(cp, ns, "bob", source="cli").acquire().lease
        try:
            old_plan = ReleaseLease(
                ns,
                lease_name(ns),
                expired["metadata"]["resourceVersion"],
                expired["spec"]["holderIdentity"],
                "expired",
                "test",
            )
            assert await ctl.applier.apply(old_plan) is Outcome.CONFLICT
            assert holder(cp, ns) == taken.holder
        finally:
            taken.close()
        await wait_until_async(lambda: events(cp, ns, "LeaseExpiredReclaimed"), 30, "the Event")
        assert len(events(cp, ns, "LeaseExpiredReclaimed")) == 1


async def test_a_conflicting_write_is_re_observed_and_then_made(
    control_plane: ControlPlane, ns: str, fault_proxy: FaultProxy, controller_api: KubeApi
) -> None:
    cp = control_plane
    fault = fault_proxy.add(method="PATCH", resource="jobs", namespace=ns, status=409, count=1)
    async with running(controller_api, controller_settings(ns, orphan_policy="warn")):
        name = lone_finalizer(cp, ns)
        await wait_until_async(lambda: marked(cp, ns, name), 30, "marked")
        assert fault.fired == 1
        await wait_until_async(lambda: events(cp, ns, "OrphanedFinalizer"), 30, "the Event")
        assert len(events(cp, ns, "OrphanedFinalizer")) == 1


async def test_a_pod_lookup_error_is_not_taken_for_a_dead_holder(
    control_plane: ControlPlane, ns: str, fault_proxy: FaultProxy, controller_api: KubeApi
) -> None:
    cp = control_plane
    identity = holders.submitter_pod(cp, ns, "worker-0")
    taken = holders.acquire(cp, identity)
    try:
        # The holder's pod is gone before the controller starts: its watch lists nothing,
        # but the GET that must confirm the absence keeps failing, so it is unknown.
        cp.admin.delete("pods", ns, "worker-0", grace_seconds=0)
        fault = fault_proxy.add(
            method="GET", resource="pods", name="worker-0", status=500, count=None
        )
        async with running(controller_api, controller_settings(ns)) as ctl:
            await wait_until_async(lambda: fault.fired >= 3, 30, "several failed pod lookups")
            assert ctl.holders.seen(ns, "worker-0").state == "absent"
            assert holder(cp, ns) == taken.name
            fault_proxy.clear()
            await wait_until_async(
                lambda: holder(cp, ns) == "", 30, "reclaimed once the 404 is seen"
            )
            (event,) = await wait_until_async(
                lambda: events(cp, ns, "LeaseHolderGoneReclaimed"), 30, "the Event"
            )
            assert "worker-0" in event["message"] and "no longer exists" in event["message"]
    finally:
        taken.close()
