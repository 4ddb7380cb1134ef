"""Faults: API errors, dropped and expired watches, and CAS conflicts never crash the
controller nor make it act on stale data; a conflict means re-observe, not overwrite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from controller.actions import ReleaseLease
from controller.apply import Outcome
from elbgate.kube.api import KubeApi
from elbgate.lease import format_microtime
from elbgate.names import ORPHANED_SINCE_ANNOTATION, lease_name
from tests.controller.conftest import NS, controller_settings, events_for, eventually, running
from tests.kube_emulator import Emulator


def create_lease(emu: Emulator, renewed_ago: float, pod: str = "", holder: str = "") -> dict:
    renew = format_microtime(datetime.now(UTC) - timedelta(seconds=renewed_ago))
    annotations = {"elb-gate.io/holder-user": "alice"}
    if pod:
        annotations["elb-gate.io/holder-pod"] = pod
    return emu.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease_name(NS), "namespace": NS, "annotations": annotations},
            "spec": {
                "holderIdentity": holder or "dashboard-0b9f6c1e2d3a4b5c8d7e6f5a4b3c2d1e",
                "leaseDurationSeconds": 60,
                "acquireTime": renew,
                "renewTime": renew,
            },
        }
    )


def create_finalizer(emu: Emulator, name: str = "fin-1", job_id: str = "s1") -> dict:
    return emu.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {"app": "finalizer", "elb-job-id": job_id},
            },
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}
                }
            },
        }
    )


def holder(emu: Emulator) -> str:
    return str(emu.get("leases", NS, lease_name(NS))["spec"].get("holderIdentity") or "")


def annotations(emu: Emulator, name: str) -> dict[str, Any]:
    return emu.get("jobs", NS, name)["metadata"].get("annotations") or {}


async def test_a_failing_initial_list_leaves_the_namespace_alone_until_it_succeeds(
    emulator: Emulator, controller_api: KubeApi
) -> None:
    create_lease(emulator, renewed_ago=3600)  # expired: the controller would reclaim it
    fault = emulator.faults.add(method="GET", resource="jobs", status=500, count=None)
    async with running(controller_api, controller_settings()) as ctl:
        await eventually(lambda: fault.hits >= 3 and ctl.leader.may_act(), "repeated LIST errors")
        # Leader, Lease and ConfigMap watches are fine, but the namespace is not synced.
        assert not ctl.cache.synced(NS) and not ctl.health.ready()
        assert holder(emulator) != ""
        assert emulator.find("configmaps", NS, "elb-blast-liveness") is None
        assert ctl.reconciler.liveness_json(True)["namespaces"][NS]["state"] == "unknown"
        fault.remove()
        await eventually(lambda: holder(emulator) == "", "reclaimed once the LIST succeeds")
        assert ctl.health.ready()


async def test_an_expired_watch_relists_and_sees_what_happened_meanwhile(
    emulator: Emulator, controller_api: KubeApi
) -> None:
    async with running(controller_api, controller_settings(), watch_timeout_seconds=1) as ctl:
        await eventually(lambda: ctl.cache.synced(NS) and ctl.leader.may_act(), "synced leader")
        # Hold the next Jobs re-watch for a moment; meanwhile a Job appears and the history
        # is compacted, so the watch resumes from a too-old resourceVersion: 410 Gone.
        fault = emulator.faults.add(
            method="GET", resource="jobs", watch=True, status=None, delay=1.5, count=1
        )
        await eventually(lambda: fault.hits == 1, "the re-watch is waiting")
        create_finalizer(emulator)
        emulator.compact()
        await eventually(
            lambda: ORPHANED_SINCE_ANNOTATION in annotations(emulator, "fin-1"),
            "the orphan created during the outage is marked",
        )
        assert (
            ctl.metrics.registry.get_sample_value(
                "elb_gate_watch_restarts_total", {"resource": "jobs"}
            )
            >= 1
        )


async def test_dropped_watch_connections_do_not_crash_the_controller(
    emulator: Emulator, controller_api: KubeApi
) -> None:
    emulator.faults.add(method="GET", resource="leases", watch=True, drop=True, count=3)
    async with running(controller_api, controller_settings()) as ctl:
        await eventually(lambda: ctl.cache.synced(NS) and ctl.leader.may_act(), "synced leader")
        create_lease(emulator, renewed_ago=3600)
        await eventually(lambda: holder(emulator) == "", "the expired Lease is reclaimed")
        await eventually(lambda: events_for(emulator, "LeaseExpiredReclaimed"), "the Event")
        assert len(events_for(emulator, "LeaseExpiredReclaimed")) == 1


async def test_failed_writes_are_retried_and_evented_once(
    emulator: Emulator, controller_api: KubeApi
) -> None:
    fault = emulator.faults.add(method="PATCH", resource="leases", status=500, count=2)
    create_lease(emulator, renewed_ago=3600)
    async with running(controller_api, controller_settings()) as ctl:
        await eventually(lambda: holder(emulator) == "", "reclaimed after the errors")
        assert fault.hits == 2
        await eventually(lambda: events_for(emulator, "LeaseExpiredReclaimed"), "the Event")
        assert len(events_for(emulator, "LeaseExpiredReclaimed")) == 1
        assert (
            ctl.metrics.registry.get_sample_value(
                "elb_gate_api_errors_total",
                {"component": "controller", "verb": "patch", "resource": "leases"},
            )
            == 2
        )


async def test_a_cas_conflict_is_reported_and_never_overwrites(
    emulator: Emulator, controller_api: KubeApi
) -> None:
    stale = create_lease(emulator, renewed_ago=3600)
    async with running(controller_api, controller_settings(resync_seconds=60)) as ctl:
        await eventually(lambda: ctl.leader.may_act(), "leader")
        await eventually(lambda: holder(emulator) == "", "first reclaim")
        # The holder takes the Lease again; a plan made on the old version must not apply.
        fresh = emulator.get("leases", NS, lease_name(NS))
        fresh["spec"]["holderIdentity"] = "openapi-5f2c3b1a0e9d8c7b6a5f4e3d2c1b0a99"
        fresh["spec"]["renewTime"] = format_microtime(datetime.now(UTC))
        emulator.update(fresh)
        old_plan = ReleaseLease(
            NS,
            lease_name(NS),
            stale["metadata"]["resourceVersion"],
            stale["spec"]["holderIdentity"],
            "expired",
            "test",
        )
        assert await ctl.applier.apply(old_plan) is Outcome.CONFLICT
        assert holder(emulator) == "openapi-5f2c3b1a0e9d8c7b6a5f4e3d2c1b0a99"
        await eventually(lambda: events_for(emulator, "LeaseExpiredReclaimed"), "the Event")
        assert len(events_for(emulator, "LeaseExpiredReclaimed")) == 1


async def test_a_conflicting_write_is_re_observed_and_then_made(
    emulator: Emulator, controller_api: KubeApi
) -> None:
    fault = emulator.faults.add(method="PATCH", resource="jobs", status=409, count=1)
    create_finalizer(emulator)
    async with running(controller_api, controller_settings(orphan_policy="warn")):
        await eventually(
            lambda: ORPHANED_SINCE_ANNOTATION in annotations(emulator, "fin-1"), "marked"
        )
        assert fault.hits == 1
        await eventually(lambda: events_for(emulator, "OrphanedFinalizer"), "the Event")
        assert len(events_for(emulator, "OrphanedFinalizer")) == 1


async def test_a_pod_lookup_error_is_not_taken_for_a_dead_holder(
    emulator: Emulator, controller_api: KubeApi
) -> None:
    # The stamped pod does not exist, but the controller cannot find that out.
    create_lease(emulator, renewed_ago=5, pod=f"{NS}/worker-0/uid-0")
    fault = emulator.faults.add(method="GET", resource="pods", status=500, count=None)
    settings = controller_settings(reclaim_grace_seconds=1)
    async with running(controller_api, settings):
        await eventually(lambda: fault.hits >= 3, "several failed pod lookups")
        assert holder(emulator) != ""
        fault.remove()
        await eventually(lambda: holder(emulator) == "", "reclaimed once the 404 is seen")
        (event,) = await eventually(
            lambda: events_for(emulator, "LeaseHolderGoneReclaimed"), "the Event"
        )
        assert "worker-0" in event["message"]
