"""Start a real ``python -m controller`` against the control plane, and watch it.

Shared by the controller integration tests, the demo and the reliability suites::

    with ControllerProcess.start(cp, name="ctl-a", namespaces=["blast"]) as ctl:
        ctl.wait_until(lambda: ctl.is_leader(), 30, "ctl-a leads")
        print(ctl.get_json("/liveness"))

The process authenticates with a token of the controller's ServiceAccount
(``system:serviceaccount:elb-system:elb-gate-controller``) bound to a Pod named
after it, granted exactly what ``manifests/`` grants; it logs JSON lines to a file
(read back with :meth:`~testbed.component.ComponentProcess.logs`), and binds its metrics port on
127.0.0.1:0; the chosen port is read from its "metrics server listening" log line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from elbgate.settings import ControllerSettings
from testbed.component import ComponentProcess
from testbed.controlplane import ControlPlane
from testbed.install import CONTROLLER_SA, SYSTEM_NAMESPACE, Installation

LEADER_LEASE = (SYSTEM_NAMESPACE, ControllerSettings().leader_lease_name)
"""(namespace, name) of the Lease the controller replicas elect their leader with."""
CONTROLLER_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{CONTROLLER_SA}"


class ControllerProcess(ComponentProcess):
    """One running controller process and what it has logged."""

    @classmethod
    def start(
        cls,
        cp: ControlPlane,
        *,
        name: str = "controller-0",
        namespaces: Iterable[str] = ("default",),
        resync_seconds: float = 1.0,
        leader_lease_seconds: float = 4.0,
        leader_renew_seconds: float = 1.0,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = 120.0,
    ) -> ControllerProcess:
        """Start a controller as ``name`` watching ``namespaces`` (created if missing) and
        wait until its metrics port is known. ``env`` adds or overrides variables."""
        namespaces = list(namespaces)
        install = Installation.on(cp)
        for ns in namespaces:
            install.gate(ns)
        settings = {
            "ELB_GATE_NAMESPACES": ",".join(namespaces),
            "ELB_GATE_RESYNC_SECONDS": str(resync_seconds),
            "ELB_GATE_LEADER_LEASE_SECONDS": str(leader_lease_seconds),
            "ELB_GATE_LEADER_RENEW_SECONDS": str(leader_renew_seconds),
            "ELB_GATE_METRICS_PORT_NUMBER": "0",
            **(env or {}),
        }
        ctl = cls(install.identity("controller", name), cp.state_dir / "logs" / f"{name}.log")
        listening = ctl.spawn("controller", settings, "metrics server listening", ready_timeout)
        ctl.metrics_port = int(listening["port"])
        return ctl

    def is_leader(self) -> bool:
        try:
            return self.metric("elb_gate_leader") == 1.0
        except OSError:
            return False

    def __enter__(self) -> ControllerProcess:
        return self
