"""The system under demonstration: a real control plane, two webhook replicas behind
one Service, the controller, the gated namespace, and the identities of both submit
paths. Every elb-gate setting is at its default; the environment only names the gated
namespace and the dashboard's submitter identity.

The control plane is started here (and stopped at the end), unless
``ELB_GATE_CONTROL_PLANE`` names one already running (``make cluster``): then the demo
plays in a namespace of its own there and removes what it created when it ends.

Two ways elb-gate runs, one story: host processes behind a Service proxy (the default:
no root), or ``--system-tier``: the chart installed as shipped (``helm install``, the
image ``make image`` builds) on real kubelet nodes of the system pool, the API server
calling the webhook through the Service (testbed/system_tier.py; root). There the
system-pool nodes carry AKS's add-on taint (``CriticalAddonsOnly``, which the chart
tolerates) and the blast pool is the stand-in's, so the searches' Pods and the
submitters' Pods, whose images do not exist here, run on stand-in nodes.
"""

from __future__ import annotations

import os
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

import urllib3
import yaml

from elbgate.settings import Settings
from testbed.controlplane import (
    ATTACH_ENV,
    BLAST_POOL,
    DEFAULT_NODES,
    SYSTEM_POOL,
    ControlPlane,
    PodIdentity,
)
from testbed.demo.timeline import Timeline
from testbed.install import SYSTEM_NAMESPACE, submitter_subjects
from testbed.kubelet_stand_in import STOP_SECONDS
from testbed.rig import Rig, pod_suffix
from testbed.system_tier import SYSTEM_NODES, SystemTier

NAMESPACE = "blast"
DASHBOARD_LEASE_USER = "dashboard-lease"
DASHBOARD_APPLY_USER = "dashboard-apply"
ROGUE_USER = "mallory"
OPERATOR_USER = "operator"
OPENAPI_SA = "openapi"
TERMINATING_SECONDS = 20
"""How long the doomed OpenAPI pod stays Terminating once deleted (its process drains)."""

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
    namespace: str
    settings: Settings
    env: dict[str, str]
    """The settings environment every elb-gate process gets (and the submitters)."""
    openapi: PodIdentity
    """The OpenAPI service's pod: `elb-gate submit` runs there with its bound token."""
    doomed: PodIdentity
    """The OpenAPI service's second replica, whose pod dies while it holds the Lease."""
    webhook_urls: dict[str, str]
    """Each webhook replica's metrics address, by pod name."""
    controller_url: str
    teardown: ExitStack
    """What undoes the start, last started first (see :meth:`stop`)."""
    rig: Rig | None = None
    """The fast tier (:class:`testbed.rig.Rig`): ``python -m webhook`` twice behind a
    Service proxy, and ``python -m controller``, as host processes with the shipped RBAC.
    ``None``: ``--system-tier``, the chart installed as shipped, its Pods on real kubelet
    nodes."""

    def replica_metrics(self) -> dict[str, str]:
        """Each webhook replica's /metrics text, by pod name ("" when it does not answer).
        urllib3 uses no proxy from the environment, which must never see a Pod on the
        run's bridge."""
        out = {}
        for pod, url in self.webhook_urls.items():
            try:
                resp = urllib3.request("GET", f"{url}/metrics", timeout=30, retries=False)
                out[pod] = resp.data.decode() if resp.status == 200 else ""
            except (OSError, urllib3.exceptions.HTTPError):
                out[pod] = ""
        return out

    def stop(self) -> None:
        """Stop elb-gate (the controller first), then clean up the control plane: all of
        it when the demo started it (the system tier's with its nodes and what they
        changed on the host), else what the demo created there: its namespace and the
        Pod objects that stood for elb-gate's processes."""
        _undo(self.teardown)


def _undo(teardown: ExitStack) -> None:
    """Every step, even after one failed (ExitStack runs them all), quietly."""
    with suppress(Exception):
        teardown.close()


def _delete_pods(rig: Rig) -> None:
    """The Pod objects that stood for the rig's processes, on a control plane it shares."""
    for pod in [h.identity.pod for h in rig.hooks] + [c.name for c in rig.controllers]:
        with suppress(Exception):
            rig.cp.admin.delete("pods", SYSTEM_NAMESPACE, pod)


def _settings_env(root: Path, namespace: str) -> dict[str, str]:
    """What the environment names (the rest at its defaults): the gated namespace and
    the dashboard's submitter identity."""
    identities = root / "submitter-identities.yaml"
    identities.write_text(yaml.safe_dump(IDENTITIES))
    return {
        "ELB_GATE_NAMESPACES": namespace,
        "ELB_GATE_SUBMITTER_IDENTITIES_FILE": str(identities),
    }


def _submitter_pods(
    cp: ControlPlane, timeline: Timeline, namespace: str, node_selector: dict[str, str]
) -> tuple[PodIdentity, PodIdentity]:
    """The OpenAPI service's two pods, each with a token bound to it."""
    rs = pod_suffix()
    openapi = cp.pod_identity(
        namespace, OPENAPI_SA, pod=f"elb-openapi-{rs}-{pod_suffix()}", node_selector=node_selector
    )
    doomed = cp.pod_identity(
        namespace,
        OPENAPI_SA,
        pod=f"elb-openapi-{rs}-{pod_suffix()}",
        node_selector=node_selector,
        annotations={STOP_SECONDS: str(TERMINATING_SECONDS)},
    )
    timeline.emit(
        "setup",
        f"namespace {namespace} gated; OpenAPI pods {openapi.pod} and {doomed.pod} "
        f"Running (service account {OPENAPI_SA}, tokens bound to each pod); every "
        "setting at its default",
    )
    return openapi, doomed


def start_system(root: Path, timeline: Timeline, *, system_tier: bool = False) -> System:
    """Start everything under ``root`` and print what came up (``system_tier``: the
    chart on real kubelet nodes, see the module's docstring)."""
    if system_tier:
        return _start_system_tier(root, timeline)
    teardown = ExitStack()
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
        teardown.callback(cp.stop)
        timeline.emit(
            "setup",
            f"Kubernetes {cp.kubernetes_version} at {cp.server}, ready in "
            f"{cp.startup_seconds:.1f}s",
        )
    try:
        namespace = NAMESPACE
        if attached:
            namespace = cp.new_namespace(NAMESPACE)
            teardown.callback(cp.admin.delete, "namespaces", None, namespace)
        env = _settings_env(root, namespace)
        settings = Settings.from_env(env)
        rig = Rig(
            cp,
            [namespace],
            env=env,
            workdir=root / "webhooks",
            resync_seconds=settings.controller.resync_seconds,
            leader_lease_seconds=settings.controller.leader_lease_seconds,
            leader_renew_seconds=settings.controller.leader_renew_seconds,
        )
        if attached:
            teardown.callback(_delete_pods, rig)  # once the rig has stopped
        teardown.enter_context(rig)
        assert rig.service is not None
        for hook in rig.hooks:
            timeline.emit(
                "setup",
                f"webhook replica {hook.identity.pod}: python -m webhook, "
                f"TLS on {hook.url}, metrics {hook.metrics_url}",
            )
        timeline.emit(
            "setup",
            "webhook configurations from manifests/base/admission-webhooks.yaml registered; "
            f"Service {SYSTEM_NAMESPACE}/elb-gate-webhook -> both replicas "
            f"(127.0.0.1:{rig.service.port})",
        )
        controller = rig.wait_for_leader(120)
        timeline.emit(
            "setup",
            f"controller {controller.name}: python -m controller leads; "
            f"metrics {controller.metrics_url}/metrics",
        )
        openapi, doomed = _submitter_pods(cp, timeline, namespace, dict(SYSTEM_POOL))
    except BaseException:
        _undo(teardown)
        raise
    hooks = {h.identity.pod: h.metrics_url for h in rig.hooks}
    url = controller.metrics_url
    return System(root, cp, namespace, settings, env, openapi, doomed, hooks, url, teardown, rig)


STAND_INS = tuple(n for n in DEFAULT_NODES if n.labels == BLAST_POOL)
"""The system tier's stand-in nodes: the blast pool (the system pool is real)."""
ADDONS_TAINT = "CriticalAddonsOnly=true:NoSchedule"
"""AKS's taint of a system pool kept for add-ons (the chart's Pods tolerate it)."""


def _start_system_tier(root: Path, timeline: Timeline) -> System:
    """The chart as shipped on real kubelet nodes: ``helm install`` with the gated
    namespace and the dashboard's submitter identity as values, nothing else set."""
    if os.environ.get(ATTACH_ENV):
        raise RuntimeError(
            f"--system-tier starts its own control plane with real nodes: unset {ATTACH_ENV}"
        )
    names = ", ".join(name for name, _ in SYSTEM_NODES)
    timeline.emit(
        "setup",
        "starting the control plane with real kubelet nodes (containerd, runc, a CNI "
        f"bridge) for the system pool ({names}) and {len(STAND_INS)} stand-in blast nodes…",
    )
    # Its own temporary directory, not under root: the nodes' sockets must stay
    # within a Unix socket path's 107 bytes. Removed when the tier stops.
    tier = SystemTier.start(stand_ins=STAND_INS)
    cp = tier.cp
    teardown = ExitStack()
    teardown.callback(tier.stop)
    try:
        timeline.emit(
            "setup",
            f"Kubernetes {cp.kubernetes_version} at {cp.server}, ready in "
            f"{tier.timings['start']:.1f}s; pod bridge {tier.system['bridge']} "
            f"({tier.system['subnet']})",
        )
        for node in tier.nodes:
            tainted = tier.kubectl("admin", "taint", "nodes", node, ADDONS_TAINT, "--overwrite")
            if tainted.returncode != 0:
                raise RuntimeError(f"kubectl taint {node}: {tainted.stderr.strip()}")
        archive = tier.import_image()
        timeline.emit("setup", f"image {archive.name} (make image) imported on {names}")
        env = _settings_env(root, NAMESPACE)
        settings = Settings.from_env(env)
        tier.open_namespace(NAMESPACE, submitter_subjects(NAMESPACE))
        values = root / "values.yaml"
        values.write_text(yaml.safe_dump({"gatedNamespaces": [NAMESPACE], **IDENTITIES}))
        installed = tier.install(files=[values])
        if installed.returncode != 0:
            raise RuntimeError(f"helm install: {installed.stderr.strip()}")
        tier.wait_ready_or_crash("webhook", 2)
        tier.wait_ready_or_crash("controller", 2)
        timeline.emit(
            "setup",
            f"helm install elb-gate charts/elb-gate -n {SYSTEM_NAMESPACE} -f {values.name} "
            f"(gatedNamespaces, submitters) in {tier.timings['install']:.1f}s",
        )
        for pod in tier.pods("webhook") + tier.pods("controller"):
            timeline.emit(
                "setup",
                f"{pod['metadata']['name']} on {pod['spec']['nodeName']} "
                f"({pod['status']['podIP']}): Ready by its probes",
            )
        endpoints = ", ".join(tier.ready_endpoints("elb-gate-webhook"))
        timeline.emit(
            "setup",
            f"the API server calls the webhook through Service {SYSTEM_NAMESPACE}/"
            f"elb-gate-webhook -> EndpointSlice {endpoints}",
        )
        openapi, doomed = _submitter_pods(cp, timeline, NAMESPACE, dict(BLAST_POOL))
        hooks = tier.metrics_urls("webhook")
        url = next(iter(tier.metrics_urls("controller").values()), "")
    except BaseException:
        _undo(teardown)
        raise
    return System(root, cp, NAMESPACE, settings, env, openapi, doomed, hooks, url, teardown)
