"""The system under demonstration: a real control plane, two webhook replicas behind
one Service, the controller, the gated namespace, and the identities of both submit
paths. Every elb-gate setting is at its default; the environment only names the gated
namespace and the dashboard's submitter identity.

The control plane is started here (and stopped at the end), unless
``ELB_GATE_CONTROL_PLANE`` names one already running (``make cluster``): then the demo
plays in a namespace of its own there and removes what it created when it ends.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from elbgate.settings import Settings
from testbed.controller_process import ControllerProcess
from testbed.controlplane import ATTACH_ENV, ControlPlane, PodIdentity
from testbed.demo.timeline import Timeline
from testbed.install import SYSTEM_NAMESPACE, Installation
from testbed.webhook_service import WebhookService

NAMESPACE = "blast"
DASHBOARD_LEASE_USER = "dashboard-lease"
DASHBOARD_APPLY_USER = "dashboard-apply"
ROGUE_USER = "mallory"
OPERATOR_USER = "operator"
OPENAPI_SA = "openapi"
TERMINATING_SECONDS = 20
"""How long the doomed OpenAPI pod stays Terminating once deleted (its process drains)."""
STOP_SECONDS_ANNOTATION = "localkube.elb-gate.io/stop-seconds"

IDENTITIES = {
    "submitters": [
        {
            "name": "dashboard",
            "holderPrefix": "dashboard-",
            "users": [DASHBOARD_LEASE_USER, DASHBOARD_APPLY_USER],
        }
    ]
}
"""The dashboard takes the Lease as one user and creates Jobs as another."""


@dataclass
class System:
    """Everything that runs, and where to reach it."""

    root: Path
    cp: ControlPlane
    owns_control_plane: bool
    namespace: str
    settings: Settings
    env: dict[str, str]
    """The settings environment every elb-gate process gets (and the submitters)."""
    webhooks: WebhookService
    controller: ControllerProcess
    openapi: PodIdentity
    """The OpenAPI service's pod: `elb-gate submit` runs there with its bound token."""
    doomed: PodIdentity
    """The OpenAPI service's second replica, whose pod dies while it holds the Lease."""

    def replica_metrics(self) -> dict[str, str]:
        """Each webhook replica's /metrics text, by pod name."""
        out = {}
        for hook in self.webhooks.replicas:
            try:
                out[hook.identity.pod] = hook.metrics()
            except OSError:
                out[hook.identity.pod] = ""
        return out

    def stop(self) -> None:
        """Stop every process (controller first), then clean up the control plane: all
        of it when the demo started it, else what the demo created there."""
        _quietly(self.controller.stop)
        _quietly(self.webhooks.stop)
        if self.owns_control_plane:
            _quietly(self.cp.stop)
            return
        _quietly(lambda: self.cp.admin.delete("namespaces", None, self.namespace))
        for pod in self.system_pods():
            _quietly(partial(self.cp.admin.delete, "pods", SYSTEM_NAMESPACE, pod))

    def system_pods(self) -> list[str]:
        return [h.identity.pod for h in self.webhooks.replicas] + [self.controller.name]


def _quietly(stop: Callable[[], Any]) -> None:
    try:
        stop()
    except Exception:  # teardown goes on: every other part must still be stopped
        pass


def _suffix() -> str:
    """A pod-name suffix as a ReplicaSet makes one (so runs never collide)."""
    return secrets.token_hex(3)[:5]


def start_system(root: Path, timeline: Timeline) -> System:
    """Start everything under ``root`` and print what came up."""
    attached = os.environ.get(ATTACH_ENV)
    if attached:
        cp = ControlPlane.attach(Path(attached))
        timeline.emit("setup", f"Kubernetes {cp.kubernetes_version} at {cp.server} (running)")
    else:
        timeline.emit(
            "setup",
            "starting the control plane (etcd, kube-apiserver, "
            "controller-manager, scheduler, 5 nodes)…",
        )
        cp = ControlPlane.start(root / "control-plane")
        timeline.emit(
            "setup",
            f"Kubernetes {cp.kubernetes_version} at {cp.server}, ready in "
            f"{cp.startup_seconds:.1f}s",
        )
    webhooks: WebhookService | None = None
    controllers: list[ControllerProcess] = []
    try:
        Installation.on(cp)
        namespace = cp.new_namespace(NAMESPACE) if attached else NAMESPACE
        identities = root / "submitter-identities.yaml"
        identities.write_text(yaml.safe_dump(IDENTITIES))
        env = {
            "ELB_GATE_NAMESPACES": namespace,
            "ELB_GATE_SUBMITTER_IDENTITIES_FILE": str(identities),
        }
        settings = Settings.from_env(env)
        rs = _suffix()
        webhooks = WebhookService(
            cp,
            env=env,
            workdir=root / "webhooks",
            pods=[f"elb-gate-webhook-{rs}-{_suffix()}" for _ in range(2)],
        )

        def start_controller() -> None:
            controllers.append(
                ControllerProcess.start(
                    cp,
                    name=f"elb-gate-controller-{_suffix()}-{_suffix()}",
                    namespaces=[namespace],
                    resync_seconds=settings.controller.resync_seconds,
                    leader_lease_seconds=settings.controller.leader_lease_seconds,
                    leader_renew_seconds=settings.controller.leader_renew_seconds,
                    env=env,
                    ready_timeout=90,
                )
            )

        _in_parallel([webhooks.start, start_controller])
        webhooks.gate_namespace(namespace)
        controller = controllers[0]
        assert webhooks.proxy is not None
        for hook in webhooks.replicas:
            timeline.emit(
                "setup",
                f"webhook replica {hook.identity.pod}: python -m webhook, "
                f"TLS on {hook.url}, metrics {hook.metrics_url}",
            )
        timeline.emit(
            "setup",
            "webhook configurations from manifests/base/admission-webhooks.yaml registered; "
            f"Service {SYSTEM_NAMESPACE}/elb-gate-webhook -> both replicas "
            f"(127.0.0.1:{webhooks.proxy.port})",
        )
        controller.wait_until(controller.is_leader, 120, "the controller to lead")
        timeline.emit(
            "setup",
            f"controller {controller.name}: python -m controller leads; "
            f"metrics {controller.url('/metrics')}",
        )
        openapi = cp.pod_identity(namespace, OPENAPI_SA, pod=f"elb-openapi-{rs}-{_suffix()}")
        doomed = cp.pod_identity(
            namespace,
            OPENAPI_SA,
            pod=f"elb-openapi-{rs}-{_suffix()}",
            annotations={STOP_SECONDS_ANNOTATION: str(TERMINATING_SECONDS)},
        )
        timeline.emit(
            "setup",
            f"namespace {namespace} gated; OpenAPI pods {openapi.pod} and {doomed.pod} "
            f"Running (service account {OPENAPI_SA}, tokens bound to each pod); every "
            "setting at its default",
        )
    except BaseException:
        for ctl in controllers:
            _quietly(ctl.stop)
        if webhooks is not None:
            _quietly(webhooks.stop)
        if not attached:
            _quietly(cp.stop)
        raise
    return System(
        root,
        cp,
        not attached,
        namespace,
        settings,
        env,
        webhooks,
        controller,
        openapi,
        doomed,
    )


def _in_parallel(starts: list[Callable[[], object]]) -> None:
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
