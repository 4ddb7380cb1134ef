"""Two real ``python -m controller`` replicas on the control plane: only the leader acts,
and when it is killed the other finishes the work.

The Leases are written through the real webhook (its stamps are real) with short bounds
and no skew, so a Lease of 2 s expires during the test; the controllers judge expiry on
the same terms.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION, lease_name
from testbed import elastic_blast as elb
from testbed import holders
from testbed.controller_process import ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.holders import free_leader_lease, settle
from testbed.kubelet_stand_in import RESTART
from testbed.waiting import wait_until
from testbed.webhook_process import SHORT_LEASES, WebhookProcess
from tests.controller.observed import events, holder, liveness
from tests.graph.submitter import Submitter

# Fast clocks: a lone finalizer is an orphan at once and is deleted 1 s after its mark.
FAST = {
    **SHORT_LEASES,
    "BLAST_FINALIZER_GRACE_SECONDS": "0",
    "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "1",
    "ELB_GATE_ORPHAN_POLICY": "delete",
}
KEYS = ("stale", "dead", "orphan", "live")

Cluster = tuple[ControlPlane, dict[str, str], ControllerProcess, ControllerProcess]


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, hook: WebhookProcess) -> Iterator[Cluster]:
    """Two controller replicas (policy delete) gating a namespace per test."""
    cp = control_plane
    namespaces = {k: hook.install.gate(cp.new_namespace(k)) for k in KEYS}
    free_leader_lease(cp)
    a = b = None
    try:
        a = ControllerProcess.start(cp, name="ctl-a", namespaces=namespaces.values(), env=FAST)
        b = ControllerProcess.start(cp, name="ctl-b", namespaces=namespaces.values(), env=FAST)
        wait_until(
            lambda: a.is_leader() != b.is_leader() and a.ready() and b.ready(),
            60,
            "one leader, both ready",
        )
        yield cp, namespaces, a, b
    finally:
        for ctl in (a, b):
            if ctl is not None:
                ctl.stop()


def leader_of(a: ControllerProcess, b: ControllerProcess) -> ControllerProcess:
    wait_until(lambda: a.is_leader() or b.is_leader(), 60, "a leader")
    return a if a.is_leader() else b


def test_an_expired_lease_is_reclaimed_by_the_leader_only(cluster: Cluster) -> None:
    cp, namespaces, a, b = cluster
    ns = namespaces["stale"]
    leader = leader_of(a, b)
    follower = b if leader is a else a
    lease = Submitter(cp, ns, "alice", source="cli", ttl_seconds=2).acquire().lease  # never renewed
    try:
        assert lease.view is not None and lease.view.holder_user == "alice"
        wait_until(lambda: holder(cp, ns) == "", 30, "the expired Lease is cleared")
    finally:
        lease.close()
    after = cp.admin.get("leases", ns, lease_name(ns))
    annotations = after["metadata"].get("annotations") or {}
    assert HOLDER_USER_ANNOTATION not in annotations
    assert HOLDER_POD_ANNOTATION not in annotations
    assert after["spec"]["leaseDurationSeconds"] == 2  # the rest is kept
    (event,) = wait_until(lambda: events(cp, ns, "LeaseExpiredReclaimed"), 30, "the Event")
    assert event["reportingInstance"].startswith(leader.name + "_")
    assert event["source"]["component"] == "elb-gate-controller"
    assert leader.logs("submit Lease reclaimed") and not follower.logs("submit Lease reclaimed")
    reclaimed = leader.metric(
        "elb_gate_leases_reclaimed_total", {"namespace": ns, "reason": "expired"}
    )
    assert reclaimed == 1


def test_a_lease_whose_holder_pod_is_deleted_is_reclaimed(cluster: Cluster) -> None:
    cp, namespaces, a, b = cluster
    ns = namespaces["dead"]
    leader = leader_of(a, b)
    identity = holders.submitter_pod(cp, ns, "celery-worker-0")
    taken = holders.acquire(cp, identity)
    try:
        settle(cp, leader, ns, rounds=3)
        assert holder(cp, ns) == taken.name  # its pod runs, same uid: left alone
        cp.admin.delete("pods", ns, identity.pod)
        wait_until(lambda: holder(cp, ns) == "", 30, "reclaimed once the pod goes")
    finally:
        taken.close()
    (event,) = wait_until(lambda: events(cp, ns, "LeaseHolderGoneReclaimed"), 30, "the Event")
    assert f"{ns}/celery-worker-0" in event["message"]


def test_an_orphaned_finalizer_is_marked_evented_and_deleted(cluster: Cluster) -> None:
    cp, namespaces, a, b = cluster
    ns = namespaces["orphan"]
    leader = leader_of(a, b)
    submitter = Submitter(cp, ns, "alice", source="cli")
    job_id = elb.search_id()
    with submitter.holding():
        (fin,) = submitter.create(elb.ready(elb.finalizer(job_id), ns))
    name = fin["metadata"]["name"]
    wait_until(lambda: events(cp, ns, "OrphanedFinalizer"), 30, "the warning Event")
    wait_until(lambda: cp.admin.find("jobs", ns, name) is None, 30, "deleted")
    wait_until(lambda: events(cp, ns, "OrphanedFinalizerDeleted"), 30, "the delete Event")
    (warning,) = events(cp, ns, "OrphanedFinalizer")
    assert warning["type"] == "Warning" and name in warning["message"]
    (deleted,) = leader.logs("orphaned finalizer deleted")
    assert deleted["name"] == name and deleted["job_id"] == job_id
    assert leader.metric("elb_gate_orphaned_finalizers_deleted_total", {"namespace": ns}) == 1


def test_liveness_flips_idle_after_the_last_job_and_back_on_a_new_lease(cluster: Cluster) -> None:
    cp, namespaces, a, b = cluster
    ns = namespaces["live"]
    leader = leader_of(a, b)
    wait_until(lambda: liveness(cp, ns).get("inUse") == "false", 30, "idle at first")
    submitter = Submitter(cp, ns, "alice", source="cli")
    job_id = elb.search_id()
    with submitter.holding():
        (batch,) = submitter.create(elb.ready(elb.blast_batch(job_id, 0), ns, run_seconds=1))
        (fin,) = submitter.create(elb.ready(elb.finalizer(job_id), ns))
    wait_until(lambda: liveness(cp, ns).get("inUse") == "true", 30, "in use")
    batch_name, fin_name = batch["metadata"]["name"], fin["metadata"]["name"]

    def succeeded() -> bool:
        return bool(cp.admin.get("jobs", ns, batch_name).get("status", {}).get("succeeded"))

    wait_until(succeeded, 60, "the batch Job completes")
    settle(cp, leader, ns)
    assert liveness(cp, ns)["inUse"] == "true"  # the finalizer tail still runs
    # The finalizer's process crashes (restartPolicy Never, backoffLimit 0): Job Failed.
    (pod,) = cp.admin.list("pods", ns, label_selector=f"job-name={fin_name}")
    cp.admin.patch(
        "pods",
        ns,
        pod["metadata"]["name"],
        {"metadata": {"annotations": {RESTART: "crash"}}},
    )
    wait_until(lambda: liveness(cp, ns).get("inUse") == "false", 60, "idle after the last")
    data = liveness(cp, ns)
    assert data["idleSince"] and data["activeJobIds"] == "" and data["activeSearches"] == "0"
    lease = Submitter(cp, ns, "bob", source="cli").acquire().lease
    try:
        wait_until(lambda: liveness(cp, ns).get("inUse") == "true", 30, "in use on a Lease")
        assert liveness(cp, ns)["leaseHolder"] == lease.holder
        served = leader.get_json("/liveness")["namespaces"][ns]
        assert served["inUse"] is True and served["leaseHolder"] == lease.holder
        assert leader.metric("elb_gate_in_use", {"namespace": ns}) == 1
        lease.release()
    finally:
        lease.close()


def test_when_the_leader_is_killed_the_other_replica_takes_over_and_finishes(
    cluster: Cluster,
) -> None:
    # Runs last in this module: it kills one replica.
    cp, namespaces, a, b = cluster
    ns = namespaces["stale"]
    leader = leader_of(a, b)
    other = b if leader is a else a
    leader.kill()
    lease = Submitter(cp, ns, "carol", source="cli", ttl_seconds=2).acquire().lease
    try:
        other.wait_until(other.is_leader, 60, "the other replica leads")
        wait_until(lambda: holder(cp, ns) == "", 30, "the survivor reclaims")
    finally:
        lease.close()
    wait_until(lambda: len(events(cp, ns, "LeaseExpiredReclaimed")) == 2, 30, "its Event")
    newest = events(cp, ns, "LeaseExpiredReclaimed")[-1]
    assert newest["reportingInstance"].startswith(other.name + "_")
