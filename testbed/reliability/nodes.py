"""Nodes of their own for submitters whose node will stop being Ready.

Turning a shared node NotReady would take every Pod on it along (the webhook's and the
controller's identity Pods included). So each namespace slot gets a small Node of its
own, registered like the control plane's others (the kubelet stand-in drives every Node
labelled ``localkube.elb-gate.io/managed=true``), and only the submitter that is to die
by ``node_not_ready`` is scheduled there. :meth:`HolderNodes.not_ready` makes the
stand-in report ``Ready=False``; :meth:`HolderNodes.restore` brings it back and waits
until new Pods can be scheduled there again.
"""

from __future__ import annotations

import threading

from testbed.api import ApiError, JsonObj
from testbed.controlplane import ControlPlane
from testbed.kubelet_stand_in import KUBELET, MANAGED, NODE_INDEX
from testbed.waiting import wait_until

NODE_LABEL = "reliability.elb-gate.io/node"


def _ready(node: JsonObj | None) -> bool:
    if node is None:
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not taints


class HolderNodes:
    """One Node per namespace slot, created on first use."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self._made: set[str] = set()
        self._lock = threading.Lock()

    @staticmethod
    def name(namespace: str) -> str:
        return f"holders-{namespace}"[:63]

    def selector(self, namespace: str) -> dict[str, str]:
        """The nodeSelector of a Pod that must run on ``namespace``'s node (made if needed)."""
        name = self.name(namespace)
        with self._lock:
            if name not in self._made:
                self._create(name)
                self._made.add(name)
        return {NODE_LABEL: name}

    def _create(self, name: str) -> None:
        admin = self.cp.admin
        try:
            admin.create(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {
                            MANAGED: "true",
                            NODE_LABEL: name,
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                        },
                        "annotations": {NODE_INDEX: "40"},
                    },
                }
            )
        except ApiError as exc:
            if exc.status != 409:  # made by an earlier run on this control plane
                raise
        capacity = {"cpu": "2", "memory": "8Gi", "pods": "20"}
        # a merge patch: the kubelet stand-in writes the same status at the same time
        admin.patch(
            "nodes",
            None,
            name,
            {"status": {"capacity": capacity, "allocatable": capacity}},
            sub="status",
        )
        self.restore(name)

    def not_ready(self, name: str) -> None:
        """The node's kubelet reports ``Ready=False`` from now on."""
        self.cp.admin.patch(
            "nodes", None, name, {"metadata": {"annotations": {KUBELET: "not-ready"}}}
        )

    def restore(self, name: str) -> None:
        """Ready again, untainted (the node lifecycle controller lifts its taints). A merge
        patch removing an annotation the node does not carry changes nothing."""
        self.cp.admin.patch("nodes", None, name, {"metadata": {"annotations": {KUBELET: None}}})
        wait_until(
            lambda: _ready(self.cp.admin.find("nodes", None, name)),
            120,
            f"node {name} Ready and untainted",
            interval=0.25,
        )

    def restore_made(self, namespace: str | None = None) -> None:
        """Restore every node made (only ``namespace``'s, if it has one, when given)."""
        with self._lock:
            made = sorted(n for n in self._made if namespace is None or n == self.name(namespace))
        for name in made:
            self.restore(name)
