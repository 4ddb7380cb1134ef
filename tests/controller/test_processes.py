"""Integration: real ``python -m controller`` processes against the emulator.

Two replicas watch the same namespaces; only the leader acts, and when it is killed the
other finishes the work. Lease stamps are written directly (the webhook is not needed).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from elbgate.lease import format_microtime
from elbgate.names import lease_name
from tests.kube_emulator import Emulator
from tests.support.controller_process import ControllerProcess, ensure_namespace, wait_until

HOLDER = "dashboard-0b9f6c1e2d3a4b5c8d7e6f5a4b3c2d1e"
# Fast clocks: 1 s resync; a lone finalizer is an orphan at once and deleted 1 s later.
FAST = {
    "BLAST_FINALIZER_GRACE_SECONDS": "0",
    "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "1",
    "ELB_GATE_RECLAIM_GRACE_SECONDS": "1",
    "ELB_GATE_ORPHAN_POLICY": "delete",
}


def lease(emu: Emulator, ns: str, renewed_ago: float, pod: str = "", duration: int = 600) -> None:
    renew = format_microtime(datetime.now(UTC) - timedelta(seconds=renewed_ago))
    annotations = {"elb-gate.io/holder-user": "alice"}
    if pod:
        annotations["elb-gate.io/holder-pod"] = pod
    doc = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name(ns), "namespace": ns, "annotations": annotations},
        "spec": {
            "holderIdentity": HOLDER,
            "leaseDurationSeconds": duration,
            "acquireTime": renew,
            "renewTime": renew,
        },
    }
    current = emu.find("leases", ns, lease_name(ns))
    if current is None:
        emu.create(doc)
    else:
        doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        emu.update(doc)


def job(emu: Emulator, ns: str, name: str, app: str, job_id: str = "s1") -> dict[str, Any]:
    return emu.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {"app": app, "elb-job-id": job_id},
            },
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}
                }
            },
        }
    )


def complete(emu: Emulator, ns: str, name: str) -> None:
    obj = emu.get("jobs", ns, name)
    obj["status"] = {"succeeded": 1, "completionTime": format_microtime(datetime.now(UTC))}
    emu.update_status(obj)


def pod(emu: Emulator, ns: str, name: str) -> str:
    created = emu.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
    )
    return f"{ns}/{name}/{created['metadata']['uid']}"


def holder(emu: Emulator, ns: str) -> str:
    return str(emu.get("leases", ns, lease_name(ns))["spec"].get("holderIdentity") or "")


def events(emu: Emulator, ns: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in emu.list("events", ns) if e.get("reason") == reason]


def liveness(emu: Emulator, ns: str) -> dict[str, str]:
    cm = emu.find("configmaps", ns, "elb-blast-liveness")
    return dict((cm or {}).get("data") or {})


def reconciles(ctl: ControllerProcess) -> float:
    return ctl.metric("elb_gate_reconcile_duration_seconds_count") or 0.0


NAMESPACES = ["stale", "dead", "orphan", "live"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Emulator, ControllerProcess, ControllerProcess]]:
    """One emulator and two controller replicas (policy delete), shared by this module;
    each test works in its own namespace."""
    emu = Emulator().start()
    a = b = None
    try:
        for ns in NAMESPACES:
            ensure_namespace(emu, ns, gated=True)
        a = ControllerProcess.start(emu, name="ctl-a", namespaces=NAMESPACES, env=FAST)
        b = ControllerProcess.start(emu, name="ctl-b", namespaces=NAMESPACES, env=FAST)
        wait_until(
            lambda: a.is_leader() != b.is_leader() and a.ready() and b.ready(),
            "one leader, both ready",
            30,
        )
        yield emu, a, b
    finally:
        for ctl in (a, b):
            if ctl is not None:
                ctl.stop()
        emu.stop()


def leader_of(a: ControllerProcess, b: ControllerProcess) -> ControllerProcess:
    wait_until(lambda: a.is_leader() or b.is_leader(), "a leader", 30)
    return a if a.is_leader() else b


def test_an_expired_lease_is_reclaimed_by_the_leader_only(
    cluster: tuple[Emulator, ControllerProcess, ControllerProcess],
) -> None:
    emu, a, b = cluster
    leader = leader_of(a, b)
    follower = b if leader is a else a
    lease(emu, "stale", renewed_ago=3600, pod="stale/gone/uid")
    wait_until(lambda: holder(emu, "stale") == "", "the expired Lease is cleared", 20)
    after = emu.get("leases", "stale", lease_name("stale"))
    annotations = after["metadata"].get("annotations") or {}
    assert "elb-gate.io/holder-user" not in annotations
    assert "elb-gate.io/holder-pod" not in annotations
    assert after["spec"]["leaseDurationSeconds"] == 600  # the rest is kept
    wait_until(lambda: events(emu, "stale", "LeaseExpiredReclaimed"), "the Event", 20)
    (event,) = events(emu, "stale", "LeaseExpiredReclaimed")
    assert event["reportingInstance"].startswith(leader.name + "_")
    assert event["source"]["component"] == "elb-gate-controller"
    assert leader.logs("submit Lease reclaimed") and not follower.logs("submit Lease reclaimed")
    assert (
        leader.metric(
            "elb_gate_leases_reclaimed_total", {"namespace": "stale", "reason": "expired"}
        )
        == 1
    )


def test_a_lease_whose_holder_pod_is_deleted_is_reclaimed_within_one_resync(
    cluster: tuple[Emulator, ControllerProcess, ControllerProcess],
) -> None:
    emu, a, b = cluster
    leader = leader_of(a, b)
    stamp = pod(emu, "dead", "celery-worker-0")
    lease(emu, "dead", renewed_ago=30, pod=stamp)
    seen = reconciles(leader)
    wait_until(lambda: reconciles(leader) >= seen + 3, "three reconciles with the pod alive", 30)
    assert holder(emu, "dead") == HOLDER  # pod exists with the same uid: left alone
    emu.delete("pods", "dead", "celery-worker-0")
    wait_until(lambda: holder(emu, "dead") == "", "reclaimed after the pod is gone", 10)
    wait_until(lambda: events(emu, "dead", "LeaseHolderGoneReclaimed"), "the Event", 10)
    assert "dead/celery-worker-0" in events(emu, "dead", "LeaseHolderGoneReclaimed")[0]["message"]


def test_an_orphaned_finalizer_is_marked_evented_and_deleted(
    cluster: tuple[Emulator, ControllerProcess, ControllerProcess],
) -> None:
    emu, a, b = cluster
    leader = leader_of(a, b)
    job(emu, "orphan", "fin-lonely", "finalizer", job_id="lonely")
    wait_until(lambda: events(emu, "orphan", "OrphanedFinalizer"), "the warning Event", 20)
    wait_until(lambda: emu.find("jobs", "orphan", "fin-lonely") is None, "deleted", 20)
    wait_until(lambda: events(emu, "orphan", "OrphanedFinalizerDeleted"), "the delete Event", 20)
    (warning,) = events(emu, "orphan", "OrphanedFinalizer")
    assert warning["type"] == "Warning" and "fin-lonely" in warning["message"]
    (deleted,) = leader.logs("orphaned finalizer deleted")
    assert deleted["name"] == "fin-lonely" and deleted["job_id"] == "lonely"
    assert leader.metric("elb_gate_orphaned_finalizers_deleted_total", {"namespace": "orphan"}) == 1


def test_liveness_flips_idle_after_the_last_job_and_back_on_a_new_lease(
    cluster: tuple[Emulator, ControllerProcess, ControllerProcess],
) -> None:
    emu, a, b = cluster
    leader = leader_of(a, b)
    wait_until(lambda: liveness(emu, "live").get("inUse") == "false", "idle at first", 20)
    job(emu, "live", "blast-1", "blast", job_id="s7")
    job(emu, "live", "fin-1", "finalizer", job_id="s7")
    wait_until(lambda: liveness(emu, "live").get("inUse") == "true", "in use", 20)
    assert liveness(emu, "live")["activeJobIds"] == "s7"
    complete(emu, "live", "blast-1")
    assert liveness(emu, "live").get("inUse") == "true"  # the finalizer tail still runs
    complete(emu, "live", "fin-1")
    wait_until(lambda: liveness(emu, "live").get("inUse") == "false", "idle after the last", 20)
    data = liveness(emu, "live")
    assert data["idleSince"] and data["activeJobIds"] == "" and data["activeSearches"] == "0"
    lease(emu, "live", renewed_ago=0)
    wait_until(lambda: liveness(emu, "live").get("inUse") == "true", "in use on a Lease", 20)
    assert liveness(emu, "live")["leaseHolder"] == HOLDER
    served = leader.get_json("/liveness")["namespaces"]["live"]
    assert served["inUse"] is True and served["leaseHolder"] == HOLDER
    assert leader.metric("elb_gate_in_use", {"namespace": "live"}) == 1


def test_when_the_leader_is_killed_the_other_replica_takes_over_and_finishes(
    cluster: tuple[Emulator, ControllerProcess, ControllerProcess],
) -> None:
    # Runs last in this module: it kills one replica.
    emu, a, b = cluster
    leader = leader_of(a, b)
    other = b if leader is a else a
    leader.kill()
    lease(emu, "stale", renewed_ago=3600)
    wait_until(other.is_leader, "the other replica leads", 30)
    wait_until(lambda: holder(emu, "stale") == "", "the survivor reclaims", 20)
    wait_until(lambda: len(events(emu, "stale", "LeaseExpiredReclaimed")) == 2, "its Event", 20)
    newest = max(
        events(emu, "stale", "LeaseExpiredReclaimed"),
        key=lambda e: int(e["metadata"]["resourceVersion"]),
    )
    assert newest["reportingInstance"].startswith(other.name + "_")
