"""A holder whose pod is deleted, replaced, or finishes is reclaimed on that evidence (not
at its Lease's expiry, 15 minutes on); a new pod of the same name that acquires is never
taken for the old one. How many seconds each reclaim takes is ``make bench``'s figure
(bench/reclaim_latency.py, against the 15 s target), not an assertion here."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from elbgate.names import lease_name
from testbed import holders
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.holders import Reclaim, Stage, utc
from testbed.install import Installation
from testbed.webhook_process import WebhookProcess

NAMESPACES = ("force-deleted", "terminating", "replaced", "failed", "succeeded")
CONTROLLER = "controller-0"
REPLACEMENTS = 20


@pytest.fixture(scope="module")
def stage(
    control_plane: ControlPlane, hook: WebhookProcess, proxy: FaultProxy
) -> Iterator[tuple[Stage, dict[str, str]]]:
    namespaces = {k: hook.install.gate(control_plane.new_namespace(k)) for k in NAMESPACES}
    token = Installation.on(control_plane).identity("controller", CONTROLLER).token
    env = {"KUBECONFIG": proxy.kubeconfig(token, CONTROLLER)}
    with holders.controllers(control_plane, list(namespaces.values()), [CONTROLLER], env) as s:
        yield s, namespaces


def holder_of(cp: ControlPlane, namespace: str) -> str:
    lease = cp.admin.get("leases", namespace, lease_name(namespace))
    return str(lease["spec"].get("holderIdentity") or "")


def test_a_force_deleted_holder_pod_is_reclaimed_reading_only_that_pod(
    stage: tuple[Stage, dict[str, str]], proxy: FaultProxy, record: list[Reclaim]
) -> None:
    on, namespaces = stage
    ns = namespaces["force-deleted"]
    reclaim = holders.force_deleted(on, ns)
    record.append(reclaim)
    # The API server marks even a grace-0 deletion first (a MODIFIED event with a
    # deletionTimestamp), then removes the pod: whichever the controller saw first.
    assert reclaim.evidence in ("pod_terminating", "pod_deleted")
    # Pods: name-scoped list/watch of the stamped pod, and a GET only to confirm that it
    # is gone (a Terminating pod needs none).
    pod_calls = [(m, urlsplit(p)) for m, p in proxy.requests if "/pods" in p]
    assert pod_calls, "the controller never read the holder's pod"
    for method, url in pod_calls:
        assert method == "GET", (method, url.geturl())
        assert url.path.startswith(f"/api/v1/namespaces/{ns}/pods"), url.geturl()
    reads = [u for _m, u in pod_calls if u.path == f"/api/v1/namespaces/{ns}/pods"]
    gets = [u for _m, u in pod_calls if u.path == f"/api/v1/namespaces/{ns}/pods/{reclaim.pod}"]
    assert len(reads) + len(gets) == len(pod_calls)
    for url in reads:
        assert parse_qs(url.query)["fieldSelector"] == [f"metadata.name={reclaim.pod}"]
    assert any(parse_qs(u.query).get("watch") for u in reads)  # list, then watch
    assert len(gets) == (1 if reclaim.evidence == "pod_deleted" else 0)
    # Nodes: only the holder's own node, by name.
    for method, path in proxy.requests:
        if path.startswith("/api/v1/nodes"):
            assert method == "GET"
            assert parse_qs(urlsplit(path).query)["fieldSelector"][0].startswith(
                "metadata.name=aks-"
            )


def test_a_pod_deleted_with_a_grace_period_is_reclaimed_while_it_is_still_terminating(
    stage: tuple[Stage, dict[str, str]], record: list[Reclaim]
) -> None:
    on, namespaces = stage
    reclaim, pod = holders.deleted_with_grace(on, namespaces["terminating"], grace=30)
    record.append(reclaim)
    assert reclaim.evidence == "pod_terminating"
    # Still there, Terminating, its process not yet stopped: reclaimed before the grace
    # period ends (deletionTimestamp is when the kubelet would kill it).
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert pod["status"]["phase"] == "Running"
    assert reclaim.cleared_at < utc(pod["metadata"]["deletionTimestamp"])


def test_a_pod_replaced_under_the_same_name_never_costs_the_new_holder_its_lease(
    control_plane: ControlPlane, stage: tuple[Stage, dict[str, str]], record: list[Reclaim]
) -> None:
    # A StatefulSet-like submitter: its pod is deleted and recreated under the same name,
    # and the new incarnation acquires the Lease as soon as the old holder is reclaimed.
    on, namespaces = stage
    ns = namespaces["replaced"]
    name = "elb-openapi-0"
    current = holders.acquire(control_plane, holders.submitter_pod(control_plane, ns, name))
    successors = []
    try:
        on.noticed(current)
        for _ in range(REPLACEMENTS):
            asked = holders.now()
            control_plane.admin.delete("pods", ns, name, grace_seconds=0)
            successor = holders.acquire(
                control_plane, holders.submitter_pod(control_plane, ns, name)
            )
            successors.append(successor)
            reclaim = on.reclaim_of(current, "pod_replaced", asked)
            record.append(reclaim)
            assert reclaim.evidence in ("pod_terminating", "pod_deleted", "pod_replaced")
            on.noticed(successor)
            on.settle(ns)
            assert holder_of(control_plane, ns) == successor.name
            current.close()
            current = successor
        # Every reclaim was of a holder whose pod was gone; no successor was ever cleared.
        assert all(on.audit.clears_of(s) == [] for s in successors[-1:])
        assert all(len(on.audit.clears_of(s)) == 1 for s in successors[:-1])
        logged = on.reclaims_logged(ns)
        assert len(logged) == REPLACEMENTS
        assert current.lease.release()  # the last one still held it: nobody took it
    finally:
        current.close()


@pytest.mark.parametrize(
    ("case", "phase"),
    [(holders.pod_failed, "failed"), (holders.pod_succeeded, "succeeded")],
    ids=["failed", "succeeded"],
)
def test_a_pod_that_finished_without_releasing_is_reclaimed(
    stage: tuple[Stage, dict[str, str]],
    record: list[Reclaim],
    case: holders.Case,
    phase: str,
) -> None:
    on, namespaces = stage
    reclaim = case(on, namespaces[phase])
    record.append(reclaim)
    assert reclaim.evidence == "pod_finished"
