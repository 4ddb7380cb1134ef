"""The system under demonstration: the API emulator, two webhook replicas over TLS,
the controller, the gated namespace, the users and pods of both submit paths.

Everything is started with the project's own starters (``tests/support``) and the
product's own entry points (``python -m webhook``, ``python -m controller``); this
module only wires them together and takes them down again.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from elbgate.settings import Settings
from tests.demo.timeline import Timeline
from tests.kube_emulator import Emulator, User
from tests.support.controller_process import ControllerProcess
from tests.support.webhook_process import SERVICE, WebhookProcess, wait_until

NAMESPACE = "blast"
CEILING = 3

DEMO_ENV: dict[str, str] = {
    "BLAST_MAX_RUN_CONCURRENCY": str(CEILING),
    # A short TTL (the guard's floor is 15 s) so the stale-Lease path stays plausible;
    # the exec timeout is TTL - 2 x skew = 26 s, far above a demo submit.
    "BLAST_SUBMIT_LEASE_TTL_SECONDS": "30",
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": "2",
    # Longer than a demo search's longest batch Job (5 s) plus scheduling noise, so a
    # finalizer is never called an orphan in the instant between its last batch Job
    # finishing and itself finishing; short enough to see the orphan GC within the minute.
    "BLAST_FINALIZER_GRACE_SECONDS": "8",
    "BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS": "120",
    "BLAST_CAPACITY_WAIT_MAX_SECONDS": "120",
    "ELB_GATE_NAMESPACES": NAMESPACE,
    "ELB_GATE_RESYNC_SECONDS": "2",
    "ELB_GATE_RECLAIM_GRACE_SECONDS": "3",
    "ELB_GATE_ORPHAN_POLICY": "delete",
    "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "3",
    # A laptop running ~15 processes on 2 cores: give each API call while deciding a
    # little more room than the 1.5 s default (still well inside timeoutSeconds 5).
    "ELB_GATE_API_TIMEOUT_SECONDS": "3",
}

DASHBOARD_LEASE_USER = "dashboard-lease"
DASHBOARD_APPLY_USER = "dashboard-apply"
ROGUE_USER = "rogue"
OPENAPI_SA = "openapi"
OPENAPI_POD = "openapi-7f9c4d-x2k8p"
DOOMED_USER = "openapi-replica-2"
"""Emulator user name of the OpenAPI service's second replica (same service account)."""
DOOMED_POD = "openapi-7f9c4d-q4zt7"

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
class Cluster:
    """Everything that runs, and where to reach it."""

    root: Path
    emu: Emulator
    settings: Settings
    env: dict[str, str]
    """The settings environment every elb-gate process gets."""
    replicas: dict[str, WebhookProcess]
    controller: ControllerProcess
    serving: str = "A"
    """The replica the Service points at."""
    stopped_metrics: dict[str, str] = field(default_factory=dict)
    """Last /metrics text of replicas that were stopped."""

    def fail_over(self, to: str = "B") -> str:
        """Point the Service at replica ``to``, then stop the one it pointed at before
        (an endpoint removed before its pod terminates, as a rollout does). Returns the
        stopped replica's name."""
        old, new = self.serving, self.replicas[to]
        self.emu.services[SERVICE] = ("127.0.0.1", new.port)
        self.serving = to
        gone = self.replicas[old]
        # Reviews already on their way to the old replica finish there (graceful stop);
        # its counters are read just before it exits.
        wait_until(lambda: _in_flight(gone) == 0, 10, "in-flight reviews to drain")
        self.stopped_metrics[old] = _metrics_or_empty(gone)
        gone.stop()
        return old

    def metrics(self, replica: str) -> str:
        """The replica's /metrics text (the last one read, if it was stopped)."""
        if replica in self.stopped_metrics:
            return self.stopped_metrics[replica]
        return _metrics_or_empty(self.replicas[replica])

    def stop(self) -> None:
        """Stop every process (controller first: its writes go through nobody), then
        the emulator. Safe to call twice and after a partial start."""
        _quietly(self.controller.stop)
        for hook in self.replicas.values():
            _quietly(hook.stop)
        _quietly(self.emu.stop)


def _metrics_or_empty(hook: WebhookProcess) -> str:
    try:
        return hook.metrics()
    except OSError:
        return ""


def _in_flight(hook: WebhookProcess) -> float:
    total = 0.0
    for line in _metrics_or_empty(hook).splitlines():
        if line.startswith("elb_gate_admission_in_flight"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _quietly(stop: Any) -> None:
    try:
        stop()
    except Exception:  # teardown goes on: every other part must still be stopped
        pass


def _pod(emu: Emulator, name: str) -> str:
    """Create a Running pod of the OpenAPI Deployment; returns its uid."""
    pod = emu.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "openapi"}},
            "spec": {
                "serviceAccountName": OPENAPI_SA,
                "containers": [{"name": "api", "image": "blast-openapi:2.4"}],
            },
            "status": {"phase": "Running"},
        }
    )
    return str(pod["metadata"]["uid"])


def start_cluster(root: Path, timeline: Timeline) -> Cluster:
    """Start everything under ``root`` and print what came up."""
    identities = root / "submitter-identities.yaml"
    identities.write_text(yaml.safe_dump(IDENTITIES))
    env = {**DEMO_ENV, "ELB_GATE_SUBMITTER_IDENTITIES_FILE": str(identities)}
    settings = Settings.from_env(env)

    emu = Emulator(
        users=[User.plain(DASHBOARD_LEASE_USER), User.plain(DASHBOARD_APPLY_USER),
               User.plain(ROGUE_USER)],
        state_dir=root / "emulator",
    ).start()  # fmt: skip
    replicas: dict[str, WebhookProcess] = {}
    started: list[ControllerProcess] = []
    try:
        emu.create(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": NAMESPACE, "labels": {"elb-gate.io/gated": "true"}},
            }
        )
        # Both replicas of the OpenAPI service run as one service account; each bound
        # token names its own pod, which the Lease stamp records.
        first = User.service_account(NAMESPACE, OPENAPI_SA, pod=OPENAPI_POD,
                                     pod_uid=_pod(emu, OPENAPI_POD))  # fmt: skip
        emu.add_user(first)
        second = User.service_account(NAMESPACE, OPENAPI_SA, pod=DOOMED_POD,
                                      pod_uid=_pod(emu, DOOMED_POD))  # fmt: skip
        emu.add_user(dataclasses.replace(second, name=DOOMED_USER))
        timeline.emit("setup", f"Kubernetes API emulator at {emu.url}; namespace {NAMESPACE} "
                      f"gated; pods {OPENAPI_POD}, {DOOMED_POD} running")  # fmt: skip

        # Two webhook replicas behind one Service, sharing one serving certificate (one
        # Secret mounted in both pods). Registered once, from manifests/. The controller
        # starts alongside: each process takes seconds to import on a small laptop.
        replicas["A"] = WebhookProcess(emu, env, workdir=root / "webhook-a", register=False)
        replicas["B"] = WebhookProcess(emu, env, workdir=root / "webhook-b", register=False)
        replicas["B"].certificate = replicas["A"].certificate

        def start_controller() -> None:
            started.append(
                ControllerProcess.start(
                    emu,
                    name="elb-gate-controller-0",
                    namespaces=[NAMESPACE],
                    resync_seconds=settings.resync_seconds,
                    env=env,
                    ready_timeout=60,
                )
            )

        _in_parallel([replicas["A"].start, replicas["B"].start, start_controller])
        controller = started[0]
        replicas["A"].register()
        for name, hook in replicas.items():
            timeline.emit("setup", f"webhook replica {name}: python -m webhook, TLS on "
                          f"{hook.url}, metrics {hook.metrics_url}")  # fmt: skip
        timeline.emit("setup", "webhook configurations from manifests/base/admission-webhooks"
                      ".yaml registered; Service elb-system/elb-gate-webhook -> replica A")  # fmt: skip
        controller.wait_until(controller.is_leader, "the controller to lead", timeout=60)
        timeline.emit("setup", f"controller: python -m controller leads; metrics "
                      f"{controller.url('/metrics')}")  # fmt: skip
    except BaseException:
        for ctl in started:
            _quietly(ctl.stop)
        for hook in replicas.values():
            _quietly(hook.stop)
        _quietly(emu.stop)
        raise
    return Cluster(root, emu, settings, env, replicas, controller)


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
