"""Several webhook replicas behind one Service, as a cluster runs them.

    with WebhookService(cp, replicas=2, env=env) as service:   # both started, one cert
        service.gate_namespace("blast")
        service.replicas[0].metrics()                            # each replica's /metrics

On a cluster, ``Service elb-system/elb-gate-webhook`` spreads the API server's
connections over the ready webhook pods (kube-proxy: per TCP connection). Here the test
bed's TCP forwarder on 127.0.0.1 (:class:`testbed.service.Service`, ``service.proxy``)
plays that part, and the shipped webhook configurations are registered with the
testbed's one transformation (:func:`testbed.webhook_process.point_at`) aimed at it. The
replicas share one serving certificate, as two pods mounting one Secret do.

The fast tier is enough for what it is used for (two replicas deciding at once, each
connection to one of them): the forwarder spreads connections over the ready replicas
as kube-proxy does; the real Service → EndpointSlice → Pod path is tests/system/.
The rig (:mod:`testbed.rig`) runs its webhooks as one of these; the reliability runs'
configuration gives each replica a certificate of its own (``caBundle`` then carries
every CA) and, where faults are injected, its own kubeconfig through the fault proxy.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from testbed.controlplane import ControlPlane
from testbed.install import Installation
from testbed.service import Service
from testbed.webhook_process import (
    WebhookProcess,
    await_webhooks_called,
    point_at,
    register,
    shipped_configurations,
    unregister,
)


class WebhookService:
    """``replicas`` webhook processes behind a :class:`~testbed.service.Service`
    (``proxy``, once started), registered once."""

    def __init__(
        self,
        cp: ControlPlane,
        *,
        replicas: int = 2,
        env: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        pods: list[str] | None = None,
        shared_certificate: bool = True,
        kubeconfig: Callable[[str], str | None] | None = None,
        effective_seconds: float = 60.0,
    ) -> None:
        """``shared_certificate``: the replicas serve one certificate (one Secret mounted
        twice), else each its own. ``kubeconfig(pod)``: a replica's kubeconfig in place of
        its ServiceAccount's (e.g. one through a fault proxy)."""
        self.cp = cp
        self.install = Installation.on(cp)
        names = pods or [f"elb-gate-webhook-{i}" for i in range(replicas)]
        self.replicas = [
            WebhookProcess(
                cp,
                env,
                register=False,
                pod=name,
                workdir=(workdir / name) if workdir else None,
                kubeconfig=kubeconfig(name) if kubeconfig else None,
            )
            for name in names
        ]
        if shared_certificate:
            for other in self.replicas[1:]:
                other.certificate = self.replicas[0].certificate
        self.effective_seconds = effective_seconds
        self.proxy: Service | None = None
        self._registered: list[tuple[str, str]] = []

    def start(self) -> WebhookService:
        """Start every replica (side by side), the Service, then register."""
        try:
            in_parallel([hook.start for hook in self.replicas])
        except BaseException:
            self.stop()
            raise
        self.proxy = Service(self.replicas).start()
        self.register()
        return self

    def configurations(self) -> list[dict[str, Any]]:
        """The shipped configurations pointed at the Service, trusting every replica's CA."""
        assert self.proxy is not None
        cas = dict.fromkeys(h.certificate.ca_pem for h in self.replicas)
        ca_bundle = base64.b64encode(b"".join(cas)).decode()
        return point_at(shipped_configurations(), self.proxy.port, ca_bundle)

    def register(self) -> None:
        register(self.cp, self.configurations(), self._registered)
        await_webhooks_called(
            self.install,
            self.replicas,
            self.effective_seconds,
            "the API server to call the webhook Service",
        )

    def unregister(self) -> None:
        assert self.proxy is not None or not self._registered
        if self.proxy is not None:
            unregister(self.cp, self._registered, self.proxy.port)

    def gate_namespace(self, namespace: str) -> str:
        """Create ``namespace`` if needed, with a gated namespace's RoleBindings and label."""
        return self.install.gate(namespace)

    def stop(self) -> None:
        """Unregister, stop the Service and every replica (safe after a partial start)."""
        try:
            self.unregister()
        finally:
            if self.proxy is not None:
                self.proxy.stop()
            for hook in self.replicas:
                hook.stop()

    def __enter__(self) -> WebhookService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def in_parallel(starts: list[Callable[[], object]]) -> None:
    """Run the start functions side by side; raise the first failure after all ended."""
    errors: list[BaseException] = []

    def run(start: Callable[[], object]) -> None:
        try:
            start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(start,)) for start in starts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
