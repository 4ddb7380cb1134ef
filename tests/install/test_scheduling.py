"""Where the chart's pods run and how they leave: the system node pool by default
(never the BLAST pool), and disruption budgets that let a drain through at any
replica count — checked on the real control plane (its scheduler places the
chart's own Deployment; its disruption controller judges real evictions)."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.api import ApiError
from testbed.controlplane import SYSTEM_POOL, ControlPlane
from testbed.waiting import wait_until
from tests.install.chart import render
from tests.install.rendering import Obj, one, select

SYSTEM_TERM = {"key": "kubernetes.azure.com/mode", "operator": "In", "values": ["system"]}
CRITICAL_ADDONS = {"key": "CriticalAddonsOnly", "operator": "Exists"}


def _pod(objects: list[Obj], component: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment", f"elb-gate-{component}")["spec"]["template"][
        "spec"
    ]
    return spec


# --- rendered ---------------------------------------------------------------------------


@pytest.mark.parametrize("component", ["webhook", "controller"])
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_the_budget_lets_one_replica_go_at_any_count(component: str, replicas: int) -> None:
    objects = render({f"{component}.replicas": replicas})
    budget = one(objects, "PodDisruptionBudget", f"elb-gate-{component}")["spec"]
    assert budget["maxUnavailable"] == 1 and "minAvailable" not in budget


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_by_default_both_run_only_on_the_system_pool_tolerating_critical_addons_only(
    component: str,
) -> None:
    pod = _pod(render(), component)
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required == {"nodeSelectorTerms": [{"matchExpressions": [SYSTEM_TERM]}]}
    assert pod["tolerations"] == [CRITICAL_ADDONS]


def test_the_controller_keeps_its_spread_next_to_the_pool_affinity() -> None:
    affinity = _pod(render(), "controller")["affinity"]
    assert set(affinity) == {"nodeAffinity", "podAntiAffinity"}


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_preferred_prefers_the_system_pool_and_off_says_nothing_of_it(component: str) -> None:
    preferred = _pod(render({"systemPool": "preferred"}), component)["affinity"]["nodeAffinity"]
    assert preferred == {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [SYSTEM_TERM]}}
        ]
    }
    off = _pod(render({"systemPool": "off"}), component)
    assert "nodeAffinity" not in off.get("affinity", {})
    assert "tolerations" not in off


def test_your_own_node_affinity_and_tolerations_replace_and_join_the_defaults() -> None:
    mine = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "agentpool", "operator": "In", "values": ["ops"]}
                        ]
                    }
                ]
            }
        }
    }
    taint = {"key": "ops", "operator": "Exists", "effect": "NoSchedule"}
    pod = _pod(
        render(
            {
                "webhook.affinity": mine,
                "webhook.tolerations": [taint, CRITICAL_ADDONS],
            }
        ),
        "webhook",
    )
    assert pod["affinity"] == mine
    assert pod["tolerations"] == [taint, CRITICAL_ADDONS]


# --- on the control plane ---------------------------------------------------------------


def _install_component(cp: ControlPlane, ns: str, component: str, replicas: int) -> None:
    """The chart's own ServiceAccount, quota, budget and Deployment of ``component``
    (the kubelet stand-in runs no container: the pods go Running and Ready)."""
    objects = render({f"{component}.replicas": replicas}, namespace=ns)
    wanted = [
        *select(objects, "ServiceAccount", f"elb-gate-{component}"),
        *select(objects, "ResourceQuota"),
        one(objects, "PodDisruptionBudget", f"elb-gate-{component}"),
        one(objects, "Deployment", f"elb-gate-{component}"),
    ]
    for obj in wanted:
        cp.admin.create(obj, namespace=ns)


def _ready_pods(cp: ControlPlane, ns: str, component: str) -> list[Obj]:
    pods = cp.admin.list("pods", ns, label_selector=f"app.kubernetes.io/component={component}")
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p.get("status", {}).get("conditions", [])
        )
    ]


def _evict(cp: ControlPlane, ns: str, pod: Obj) -> int:
    name = pod["metadata"]["name"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
    }
    try:
        cp.admin.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", body)
    except ApiError as exc:
        return exc.status
    return 201


def _budget_allows(cp: ControlPlane, ns: str, component: str, count: int) -> bool:
    budget = cp.admin.get("poddisruptionbudgets", ns, f"elb-gate-{component}")
    status = budget.get("status", {})
    return (
        status.get("observedGeneration") == budget["metadata"]["generation"]
        and status.get("disruptionsAllowed") == count
    )


def _drain_evicts(cp: ControlPlane, ns: str, pod: Obj) -> None:
    """Evict ``pod`` as ``kubectl drain`` does, retrying while the budget answers
    429; fails when the budget never lets it go."""
    codes: list[int] = []

    def evicted() -> bool:
        codes.append(_evict(cp, ns, pod))
        return codes[-1] == 201

    wait_until(
        evicted,
        120,
        f"the eviction of {pod['metadata']['name']}",
        interval=2.0,
        detail=lambda: f"answers: {codes}",
    )
    assert set(codes) <= {201, 429}, codes


@pytest.mark.parametrize("component", ["webhook", "controller"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_drain_is_never_blocked_and_the_pods_run_on_the_system_pool(
    control_plane: ControlPlane, component: str, replicas: int
) -> None:
    cp = control_plane
    ns = cp.new_namespace(f"drain-{component[:4]}-{replicas}")
    try:
        _install_component(cp, ns, component, replicas)
        wait_until(
            lambda: len(_ready_pods(cp, ns, component)) == replicas,
            120,
            f"{replicas} ready {component} pod(s)",
        )
        pods = _ready_pods(cp, ns, component)
        nodes = {n["metadata"]["name"]: n for n in cp.admin.list("nodes", None)}
        for pod in pods:
            labels = nodes[pod["spec"]["nodeName"]]["metadata"]["labels"]
            assert labels["kubernetes.azure.com/mode"] == SYSTEM_POOL["kubernetes.azure.com/mode"]
        wait_until(lambda: _budget_allows(cp, ns, component, 1), 60, "the budget observed")
        # As kubectl drain does: evict each pod, retrying while the budget
        # answers 429 (it lets one replica go at a time); every eviction goes through.
        for pod in pods:
            _drain_evicts(cp, ns, pod)
    finally:
        cp.admin.delete("namespaces", None, ns)
