"""elb-gate installed on the real control plane as a cluster runs it, for the reliability runs.

Two real ``python -m webhook`` replicas behind one Service address
(:class:`~testbed.webhook_service.WebhookService`), the shipped webhook configurations
pointed at that address with both replicas' CAs in ``caBundle``, and one or more real
``python -m controller`` replicas, leader-elected. Every component authenticates as
its own ServiceAccount with exactly the shipped RBAC (see :mod:`testbed.install`).
Either component can be put behind a :class:`~testbed.faultproxy.FaultProxy`.

The fast tier is enough here: the reliability runs judge decisions and their races
under injected faults, which need thousands of schedules, not a container runtime;
what a kubelet does to an install (probes, restarts, OOM, drains) is tests/system/.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Mapping

from testbed.controller_process import CONTROLLER_USER, LEADER_LEASE, ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.install import Installation
from testbed.service import Service
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from testbed.webhook_service import WebhookService

SHARED_ENV: dict[str, str] = {
    "BLAST_MAX_RUN_CONCURRENCY": "2",
    "BLAST_SUBMIT_LEASE_TTL_SECONDS": "5",
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": "1",
    "ELB_GATE_LEASE_MIN_DURATION_SECONDS": "1",
    "ELB_GATE_API_TIMEOUT_SECONDS": "2",
    "ELB_GATE_HOLDER_NODE_NOT_READY_SECONDS": "2",
    "CELERY_TASK_SOFT_TIME_LIMIT": "3300",
    "CELERY_TASK_TIME_LIMIT": "3600",
}
"""Settings every component of the rig shares: ceiling 2 (more contention than 3), a
5 s default Lease TTL with 1 s skew, short enough that a holder crashed without a pod
stamp is reclaimed within seconds; a holder on a not-Ready node is gone after 2 s; and a
2 s API deadline inside the configurations' 5 s webhook timeout."""

CEILING = int(SHARED_ENV["BLAST_MAX_RUN_CONCURRENCY"])
TTL_SECONDS = int(SHARED_ENV["BLAST_SUBMIT_LEASE_TTL_SECONDS"])
SKEW_SECONDS = float(SHARED_ENV["BLAST_LEASE_CLOCK_SKEW_SECONDS"])
CONTROLLER_SKEW_SECONDS = 3
CONTROLLER_ENV: dict[str, str] = {
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": str(CONTROLLER_SKEW_SECONDS),
    # Settings derive a submit's exec deadline from TTL - 2 x skew, which a 3 s skew
    # makes negative; the controller runs no submit, so any valid value does.
    "ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS": "4",
}
"""The race rig's controller reads expiry with a 2 s wider margin than the webhook and
the submitters, as a controller whose clock runs up to 2 s behind theirs would: Gate A
needs no controller, and for those 2 s after a hold expires only a waiting submitter can
take it over. Without it the controller, which looks again at the exact expiry, clears
nearly every expired hold itself and the takeover of an expired hold is never shown."""
FINALIZER_GRACE_SECONDS = 300.0
"""The default grace (BLAST_FINALIZER_GRACE_SECONDS is not overridden by the race rig)."""


class Rig:
    """Webhook replicas behind a Service, and controller replicas, on one control plane."""

    def __init__(
        self,
        cp: ControlPlane,
        namespaces: Iterable[str],
        *,
        replicas: int = 2,
        controllers: int = 1,
        env: Mapping[str, str] | None = None,
        controller_env: Mapping[str, str] | None = None,
        resync_seconds: float = 1.0,
        proxy: FaultProxy | None = None,
    ) -> None:
        self.cp = cp
        self.namespaces = list(namespaces)
        self.env = {**SHARED_ENV, **(env or {})}
        self.controller_env = {**self.env, **(controller_env or {})}
        self.controller_count = controllers
        self.resync_seconds = resync_seconds
        self.proxy = proxy
        self.install = Installation.on(cp)
        self.run_id = uuid.uuid4().hex[:5]
        # Pod names unique per rig: an attached control plane keeps earlier runs' Pods.
        self.webhooks = WebhookService(
            cp,
            env=self.env,
            pods=[f"elb-gate-webhook-{'abcdefgh'[i]}-{self.run_id}" for i in range(replicas)],
            shared_certificate=False,
            kubeconfig=self._webhook_kubeconfig if proxy is not None else None,
            effective_seconds=120.0,
        )
        self.controllers: list[ControllerProcess] = []
        self._starts = itertools.count()

    @property
    def hooks(self) -> list[WebhookProcess]:
        return self.webhooks.replicas

    @property
    def service(self) -> Service | None:
        return self.webhooks.proxy

    def _webhook_kubeconfig(self, pod: str) -> str:
        assert self.proxy is not None
        return self.proxy.kubeconfig(self.install.identity("webhook", pod).token, pod)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Rig:
        try:
            for ns in self.namespaces:
                self.install.gate(ns)
            self.webhooks.start()
            for i in range(self.controller_count):
                self.start_controller(i)
        except BaseException:
            self.stop()
            raise
        return self

    def start_controller(self, index: int) -> ControllerProcess:
        """Start controller replica ``index`` (replacing a stopped one)."""
        name = f"elb-gate-controller-{index}-{self.run_id}-{next(self._starts)}"
        env = dict(self.controller_env)
        if self.proxy is not None:
            token = self.install.identity("controller", name).token
            env["KUBECONFIG"] = self.proxy.kubeconfig(token, name)
        ctl = ControllerProcess.start(
            self.cp,
            name=name,
            namespaces=self.namespaces,
            resync_seconds=self.resync_seconds,
            # client-go's proportions (15/10/2), scaled down: a busy machine must not
            # cost the leader its Lease every few seconds.
            leader_lease_seconds=6.0,
            leader_renew_seconds=1.0,
            env=env,
            ready_timeout=90.0,
        )
        if index < len(self.controllers):
            self.controllers[index] = ctl
        else:
            self.controllers.append(ctl)
        return ctl

    def stop(self) -> None:
        for ctl in self.controllers:
            ctl.stop()
        self.webhooks.stop()

    def __enter__(self) -> Rig:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- waiting -------------------------------------------------------------------------

    def wait_for_leader(self, timeout: float = 180.0) -> ControllerProcess:
        """The controller replica that leads, once one does."""
        found = wait_until(
            lambda: next((c for c in self.controllers if c.alive and c.is_leader()), None),
            timeout,
            "a controller to lead",
            detail=self._leader_lease,
        )
        assert isinstance(found, ControllerProcess)
        return found

    def _leader_lease(self) -> str:
        """Who holds the controllers' leader Lease, and what each replica logged last, for
        a failure message (another process renewing the Lease would keep this rig's
        replicas from leading; a replica that never campaigned says why in its log)."""
        lease = self.cp.admin.find("leases", LEADER_LEASE[0], LEADER_LEASE[1])
        if lease is None:
            held = "the leader Lease does not exist"
        else:
            spec = lease.get("spec") or {}
            held = (
                f"leader Lease held by {spec.get('holderIdentity')!r}, renewed "
                f"{spec.get('renewTime')}"
            )
        replicas = "\n".join(
            f"{c.name} ({'running' if c.alive else 'exited'}): {c.log_tail(10)}"
            for c in self.controllers
        )
        return f"{held}; this rig's replicas:\n{replicas}"

    def wait_until_ready(self, timeout: float = 180.0) -> None:
        """Every replica routable and a controller leading."""
        assert self.service is not None
        service = self.service
        wait_until(service.all_ready, timeout, "every webhook replica ready in the Service")
        self.wait_for_leader(timeout)

    # -- namespaces ----------------------------------------------------------------------

    def reset_namespace(self, namespace: str, timeout: float = 120.0) -> None:
        """Empty a namespace for the next schedule: its Jobs and Pods go (the Lease
        stays: a held one cannot be deleted, and a free one is as good as none)."""
        admin = self.cp.admin
        for job in admin.list("jobs", namespace):
            admin.delete("jobs", namespace, job["metadata"]["name"])
        for pod in admin.list("pods", namespace):
            admin.delete("pods", namespace, pod["metadata"]["name"], grace_seconds=0)
        wait_until(
            lambda: not admin.list("jobs", namespace) and not admin.list("pods", namespace),
            timeout,
            f"{namespace} empty of Jobs and Pods",
            interval=0.2,
        )

    # -- observation ---------------------------------------------------------------------

    def admissions_served(self) -> list[int]:
        """Admission requests each webhook replica answered (from its /metrics)."""
        out = []
        for hook in self.hooks:
            total = 0.0
            try:
                text = hook.metrics()
            except OSError:
                text = ""
            for line in text.splitlines():
                if line.startswith("elb_gate_admission_requests_total{"):
                    total += float(line.rsplit(" ", 1)[1])
            out.append(int(total))
        return out


__all__ = [
    "CEILING",
    "CONTROLLER_ENV",
    "CONTROLLER_SKEW_SECONDS",
    "CONTROLLER_USER",
    "FINALIZER_GRACE_SECONDS",
    "SHARED_ENV",
    "SKEW_SECONDS",
    "TTL_SECONDS",
    "Rig",
]
