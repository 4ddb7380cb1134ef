"""The submit paths of the story, each speaking its own protocol.

* :class:`DashboardSubmitter` — the web dashboard's Celery task as it runs today: the
  dashboard's raw-HTTPS Lease client (:class:`testbed.clients.DashboardLeaseClient`) as
  user ``dashboard-lease``, its own census (the census LIST), then ``kubectl create -f
  -`` as user ``dashboard-apply`` (one submit path, two credentials, mapped by the
  submitter-identity file); busy or full re-queues the task after 30 s (Celery
  ``countdown=30``), the Lease released in between.
* :class:`ProcessSubmitter` — the OpenAPI service: the real ``elb-gate submit`` in the
  OpenAPI pod (its token bound to that pod), wrapping a stand-in for ``elastic-blast
  submit`` (kubectl). Without the wrapper, the same stand-in is the non-compliant
  submitter.
* :class:`DoomedSubmitter` — the OpenAPI service's second replica: it takes the Lease
  with the shared client library, then its pod is deleted (Terminating for a while)
  and it neither renews nor releases.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from client import SubmitLease
from elbgate.census import census
from elbgate.kube.config import KubeConfig
from elbgate.names import SEARCH_JOB_SELECTOR, UNFINISHED_JOB_FIELD_SELECTOR
from testbed.clients import DashboardLeaseClient
from testbed.component import host_env
from testbed.controlplane import REPO, kubectl_path
from testbed.demo.observer import brief
from testbed.demo.searches import search_manifests
from testbed.demo.system import (
    DASHBOARD_APPLY_USER,
    DASHBOARD_LEASE_USER,
    ROGUE_USER,
    System,
)
from testbed.demo.timeline import Timeline
from testbed.submit_task import SubmitTask, TaskOutcome

WAITS = {"waiting_for_submit_slot": "lease", "waiting_for_capacity": "capacity"}
"""The CLI's waiting phases, as :meth:`TaskOutcome.waiting` names them."""
ELB_GATE = str(Path(sys.executable).with_name("elb-gate"))
"""The console script this virtualenv installs (``client.cli:main``)."""


@dataclass
class Outcome(TaskOutcome):
    """How one submitter's run ended, as the submitter saw it (a dashboard task fills in
    what :class:`TaskOutcome` holds itself)."""

    label: str = ""
    path: str = ""
    """``dashboard``, ``openapi`` or ``rogue``."""
    job_id: str = ""


class DashboardSubmitter(SubmitTask):
    """One dashboard Celery task submitting one search (:class:`SubmitTask` around the
    dashboard's Lease client); it fills in its :class:`Outcome`."""

    outcome: Outcome

    def __init__(
        self, system: System, label: str, job_id: str, timeline: Timeline, stop: threading.Event
    ) -> None:
        lease = DashboardLeaseClient.on(system.cp, DASHBOARD_LEASE_USER, system.namespace)
        ceiling = system.settings.gate.max_run_concurrency
        super().__init__(label, lease, self._census, self._submit, ceiling=ceiling, stop=stop)
        self.system, self.timeline = system, timeline
        self.outcome = Outcome(label=label, path="dashboard", job_id=job_id)
        self._reader = system.cp.api(DASHBOARD_LEASE_USER)

    def _submit(self) -> tuple[bool, str]:
        """``kubectl create -f -`` of each Job in order, stopping at the first refusal."""
        outcome = self.outcome
        for manifest in search_manifests(self.system.namespace, outcome.job_id, batch_work=True):
            made = self.system.cp.kubectl(
                DASHBOARD_APPLY_USER, "create", "-f", "-", input=json.dumps(manifest)
            )
            if made.returncode != 0:
                denial = made.stderr.strip()
                self.timeline.emit("DENIED", f"{outcome.label}: {denial}")
                return False, denial
        return True, ""

    def _census(self) -> int:
        """The dashboard's capacity check: the census LIST, counted by elbgate.census."""
        jobs = self._reader.list(
            "jobs",
            self.system.namespace,
            label_selector=SEARCH_JOB_SELECTOR,
            field_selector=UNFINISHED_JOB_FIELD_SELECTOR,
        )
        grace = self.system.settings.gate.finalizer_grace_seconds
        return census(jobs, datetime.now(UTC), grace).count


class ProcessSubmitter:
    """The elastic-blast stand-in as a child process: wrapped in ``elb-gate submit`` in
    the OpenAPI pod (the OpenAPI path), or ``rogue``: bare, as user ``mallory``, without
    the Lease (the non-compliant submitter)."""

    def __init__(
        self,
        system: System,
        label: str,
        job_id: str,
        timeline: Timeline,
        *,
        rogue: bool = False,
        batch_work: bool = True,
    ) -> None:
        self.system, self.timeline = system, timeline
        self.rogue = rogue
        self.batch_work = batch_work
        self.outcome = Outcome(label=label, path="rogue" if rogue else "openapi", job_id=job_id)
        self.proc: subprocess.Popen[str] | None = None

    def argv(self) -> list[str]:
        """The stand-in for ``elastic-blast submit`` (cloud job submission), behind
        ``elb-gate submit`` unless rogue: one ``kubectl create -f -`` per Job of the
        search, in its order, as whoever ``KUBECONFIG`` names. A refused Job stops it
        there with kubectl's own message and exit status 1: Gate A and Gate B act on
        the first Job, so a refused search leaves nothing behind."""
        ns, job_id = self.system.namespace, self.outcome.job_id
        creates = []
        for n, manifest in enumerate(search_manifests(ns, job_id, batch_work=self.batch_work)):
            path = self.system.root / f"{job_id}-{n}.json"
            path.write_text(json.dumps(manifest))
            creates.append(f'"$KUBECTL" create -f - <{shlex.quote(str(path))}')
        command = ["sh", "-c", " && ".join(creates)]
        wrapper = [ELB_GATE, "-n", ns, "submit", "--source", "openapi", "--"]
        return command if self.rogue else [*wrapper, *command]

    def start(self) -> None:
        """Start the process; a thread reads what it prints. Its environment: the demo's
        settings, the identity's kubeconfig, the pinned kubectl; never an in-cluster
        configuration."""
        system = self.system
        kubeconfig = system.cp.kubeconfig(ROGUE_USER) if self.rogue else system.openapi.kubeconfig
        env = {
            **host_env(kubeconfig),
            **system.env,
            "KUBECTL": str(kubectl_path()),
            "KUBECACHEDIR": str(system.root / "kubectl-cache"),
            "PYTHONUNBUFFERED": "1",
        }
        self.proc = subprocess.Popen(
            self.argv(),
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own session: the demo decides when it is stopped (SIGTERM: elb-gate
            # stops COMMAND, then releases the Lease), not the terminal's Ctrl-C.
            start_new_session=True,
        )
        threading.Thread(target=self._read, name=self.outcome.label, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        line = ""
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            if line.startswith("elb-gate: "):
                phase = line.split()[1].rstrip(":")
                self.outcome.waiting(WAITS.get(phase, phase))
            elif "Error from server" in line or "denied the request" in line:
                self.outcome.output = line  # kubectl's error text
        code = self.proc.wait()
        if code != 0:
            if self.outcome.output:
                self.timeline.emit("DENIED", f"{self.outcome.label}: {self.outcome.output}")
            else:  # the last line it printed
                self.timeline.emit("error", f"{self.outcome.label} exited {code}: {line}")
        self.outcome.exit_code = code

    def terminate(self) -> None:
        """SIGTERM (elb-gate stops COMMAND, then releases the Lease); SIGKILL after 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        except ProcessLookupError:
            pass


class DoomedSubmitter(threading.Thread):
    """The OpenAPI service's second replica: takes the Lease, then dies with its pod.

    It uses the shared client library (``client.SubmitLease``) with a token bound
    to its own pod, which the webhook stamps on the Lease. Once it holds the Lease it does
    nothing more: no renewal, no release, as a process killed with its pod (which the
    scenario then deletes) leaves it."""

    def __init__(self, system: System, timeline: Timeline, stop: threading.Event) -> None:
        super().__init__(name="doomed-submitter", daemon=True)
        self.system, self.timeline, self.stop = system, timeline, stop
        config = KubeConfig.from_kubeconfig(system.doomed.kubeconfig)
        self.lease = SubmitLease(
            system.namespace, gate=system.settings.gate, config=config, source="openapi"
        )
        self.acquired_at: float | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    if self.lease.acquire().acquired:
                        break
                except Exception:  # an outage: try again, as the real path would
                    pass
                self.stop.wait(1.0)
            else:
                return
            self.acquired_at = self.timeline.elapsed()
            self.timeline.emit(
                "lease",
                f"OpenAPI replica 2 (pod {self.system.namespace}/{self.system.doomed.pod}) took "
                f"the Lease as {brief(self.lease.holder)}; the webhook stamped its pod on it",
            )
        finally:
            # Close the transport only. No release, no renewal: once its pod is gone,
            # that is what the controller has to repair.
            self.lease.close()
