"""The submit paths of the story, each speaking its own protocol.

* :class:`DashboardSubmitter` — the web dashboard's Celery task: the raw-HTTP Lease
  client the dashboard already has (GET; POST; PUT with resourceVersion; 409 =
  busy) as user ``dashboard-lease``, its own census, then ``kubectl create -f -``
  as user ``dashboard-apply`` (one submit path, two credentials, mapped by the
  submitter-identity file).
* :class:`CliSubmitter` — the OpenAPI service: the real ``elb-gate submit`` as the
  pod-stamped service account, wrapping the elastic-blast stand-in.
* :class:`RogueSubmitter` — the same stand-in run without any Lease.
* :class:`DoomedSubmitter` — an OpenAPI replica that takes the Lease (with the
  shared client library) and then dies with its pod: no renewal, no release.
"""

from __future__ import annotations

import json
import os
import random
import signal
import ssl
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from elbgate.census import Census, census
from elbgate.client import SubmitLease
from elbgate.kube.config import KubeConfig
from elbgate.lease import new_holder_identity
from elbgate.names import SEARCH_JOB_SELECTOR, UNFINISHED_JOB_FIELD_SELECTOR
from elbgate.settings import Settings
from tests.demo.cluster import (
    DASHBOARD_APPLY_USER,
    DASHBOARD_LEASE_USER,
    DOOMED_POD,
    DOOMED_USER,
    NAMESPACE,
    OPENAPI_SA,
    ROGUE_USER,
    Cluster,
)
from tests.demo.elastic_blast import create_jobs
from tests.demo.jobs import search_jobs
from tests.demo.timeline import Timeline
from tests.kube_emulator.fixtures import KUBECTL, kubectl
from tests.webhook.lease_clients import ClientError, RawHttpLeaseClient

REPO = Path(__file__).resolve().parents[2]
ELB_GATE = str(Path(sys.executable).with_name("elb-gate"))
"""The console script this virtualenv installs (``elbgate.cli:main``)."""
POLL_SECONDS = 0.5


@dataclass
class Outcome:
    """How one submitter's run ended, as the submitter saw it."""

    label: str
    path: str
    """``dashboard``, ``openapi`` or ``rogue``."""
    job_id: str
    exit_code: int | None = None
    """0 = its search was submitted; ``None`` while running."""
    denial: str = ""
    """kubectl's error text when a Job was refused."""
    lease_waits: int = 0
    """Attempts that found the Lease busy."""
    capacity_waits: int = 0
    """Census checks (under the Lease) that found the namespace full."""
    errors: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.exit_code is not None


class DashboardSubmitter(threading.Thread):
    """One dashboard Celery task submitting one search."""

    def __init__(self, cluster: Cluster, label: str, job_id: str, timeline: Timeline,
                 stop: threading.Event) -> None:  # fmt: skip
        super().__init__(name=label, daemon=True)
        self.cluster, self.timeline, self.stop = cluster, timeline, stop
        self.outcome = Outcome(label, "dashboard", job_id)
        self.lease = RawHttpLeaseClient(
            cluster.emu, DASHBOARD_LEASE_USER, NAMESPACE, new_holder_identity("dashboard")
        )
        self._random = random.Random(job_id)
        self._wait_state = ""

    def run(self) -> None:
        settings = self.cluster.settings
        while not self.stop.is_set():
            try:
                got = self.lease.acquire()
            except (ClientError, OSError) as exc:
                self.outcome.errors.append(f"Lease: {exc}")
                self._pause()
                continue
            if got == "busy":
                self._waiting("lease")
                self._pause()
                continue
            try:
                counted = self._census(settings)
                if counted.count >= settings.max_run_concurrency:
                    self._waiting("capacity")
                    continue  # released below, so other submitters are not blocked
                ok, text = create_jobs(search_jobs(NAMESPACE, self.outcome.job_id), self._create)
            except (OSError, ValueError) as exc:
                self.outcome.errors.append(f"census: {exc}")
                continue
            finally:
                self._release()
                if not self.outcome.done:
                    self._pause()
            if not ok:
                self.outcome.denial = text
                self.timeline.emit("DENIED", f"{self.outcome.label}: {text}")
            self.outcome.exit_code = 0 if ok else 1
            return

    def _waiting(self, what: str) -> None:
        """Count waiting episodes (a change into a wait), as the CLI reports them."""
        if what != self._wait_state:
            if what == "lease":
                self.outcome.lease_waits += 1
            else:
                self.outcome.capacity_waits += 1
        self._wait_state = what

    def _pause(self) -> None:
        self.stop.wait(POLL_SECONDS * self._random.uniform(0.6, 1.2))

    def _release(self) -> None:
        try:
            self.lease.release()
        except (ClientError, OSError) as exc:
            self.outcome.errors.append(f"release: {exc}")

    def _create(self, manifest: str) -> subprocess.CompletedProcess[str]:
        return kubectl(self.cluster.emu, DASHBOARD_APPLY_USER, "create", "-f", "-",
                       input=manifest)  # fmt: skip

    def _census(self, settings: Settings) -> Census:
        """The dashboard's capacity check: the census LIST, counted by elbgate.census."""
        emu = self.cluster.emu
        query = urllib.parse.urlencode(
            {"labelSelector": SEARCH_JOB_SELECTOR, "fieldSelector": UNFINISHED_JOB_FIELD_SELECTOR}
        )
        req = urllib.request.Request(
            f"{emu.url}/apis/batch/v1/namespaces/{NAMESPACE}/jobs?{query}",
            headers={"Authorization": f"Bearer {emu.token(DASHBOARD_LEASE_USER)}",
                     "Accept": "application/json"},
        )  # fmt: skip
        ctx = ssl.create_default_context(cafile=emu.ca_file)
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            items = json.loads(resp.read()).get("items") or []
        return census(items, datetime.now(UTC), settings.finalizer_grace_seconds)


def child_env(cluster: Cluster, user: str) -> dict[str, str]:
    """The environment of a submitter process: the demo's settings, the user's
    kubeconfig, never an in-cluster configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELB_GATE_", "BLAST_"))}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return {
        **env,
        **cluster.env,
        "KUBECONFIG": cluster.emu.kubeconfig(user),
        "KUBECTL": KUBECTL,
        "KUBECACHEDIR": str(cluster.emu.state_dir / "kubectl-cache"),
        "PYTHONUNBUFFERED": "1",
    }


class ProcessSubmitter:
    """The elastic-blast stand-in as a child process: wrapped in ``elb-gate submit``
    (the OpenAPI path), or bare (the non-compliant submitter)."""

    def __init__(
        self,
        cluster: Cluster,
        label: str,
        job_id: str,
        timeline: Timeline,
        *,
        user: str = OPENAPI_SA,
        path: str = "openapi",
        wrapped: bool = True,
        batch_work: bool = True,
    ) -> None:
        self.cluster, self.timeline = cluster, timeline
        self.user = user
        self.wrapped = wrapped
        self.batch_work = batch_work
        self.outcome = Outcome(label, path, job_id)
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def argv(self) -> list[str]:
        """COMMAND (the stand-in), behind ``elb-gate submit`` when wrapped."""
        command = [sys.executable, "-m", "tests.demo.elastic_blast", "--namespace", NAMESPACE,
                   "--id", self.outcome.job_id]  # fmt: skip
        if not self.batch_work:
            command.append("--no-batch-work")
        if not self.wrapped:
            return command
        return [ELB_GATE, "-n", NAMESPACE, "submit", "--source", "openapi",
                "--poll-interval", str(POLL_SECONDS), "--", *command]  # fmt: skip

    def start(self) -> ProcessSubmitter:
        """Start the process; a thread reads what it prints."""
        self.proc = subprocess.Popen(
            self.argv(),
            cwd=REPO,
            env=child_env(self.cluster, self.user),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own session: the demo decides when it is stopped (SIGTERM: elb-gate
            # stops COMMAND, then releases the Lease), not the terminal's Ctrl-C.
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=self.outcome.label, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        state = ""
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            self.lines.append(line)
            if line.startswith("elb-gate: "):
                phase = line.split()[1].rstrip(":")
                if phase != state and phase == "waiting_for_submit_slot":
                    self.outcome.lease_waits += 1
                elif phase != state and phase == "waiting_for_capacity":
                    self.outcome.capacity_waits += 1
                state = phase
            elif "Error from server" in line or "denied the request" in line:
                self.outcome.denial = line
        code = self.proc.wait()
        if code != 0:
            if self.outcome.denial:
                self.timeline.emit("DENIED", f"{self.outcome.label}: {self.outcome.denial}")
            else:
                tail = self.lines[-1] if self.lines else ""
                self.outcome.errors.append(tail)
                self.timeline.emit("error", f"{self.outcome.label} exited {code}: {tail}")
        self.outcome.exit_code = code

    @property
    def done(self) -> bool:
        return self.outcome.done

    def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM (elb-gate stops COMMAND, then releases the Lease); SIGKILL after grace."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        except ProcessLookupError:
            pass


class DoomedSubmitter(threading.Thread):
    """The OpenAPI service's second replica: takes the Lease, then dies with its pod.

    It uses the shared client library (``elbgate.client.SubmitLease``) as an
    in-process submit path would; its bound token names pod ``DOOMED_POD``, which
    the webhook stamps on the Lease. When the scenario deletes that pod, the
    submitter simply stops: no renewal, no release, as a killed process leaves it."""

    def __init__(self, cluster: Cluster, timeline: Timeline, stop: threading.Event) -> None:
        super().__init__(name="doomed-submitter", daemon=True)
        self.timeline, self.stop = timeline, stop
        config = KubeConfig.from_kubeconfig(cluster.emu.kubeconfig(DOOMED_USER))
        self.lease = SubmitLease(NAMESPACE, settings=cluster.settings, config=config,
                                 source="openapi")  # fmt: skip
        self.acquired = threading.Event()
        self.acquired_at: float | None = None
        self.pod_gone = threading.Event()
        self.errors: list[str] = []

    @property
    def holder(self) -> str:
        return self.lease.holder

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    if self.lease.acquire().acquired:
                        break
                except Exception as exc:  # an outage: try again, as the real path would
                    self.errors.append(str(exc))
                self.stop.wait(POLL_SECONDS)
            else:
                return
            self.acquired_at = self.timeline.elapsed()
            self.timeline.emit(
                "lease",
                f"OpenAPI replica 2 (pod {NAMESPACE}/{DOOMED_POD}) took the Lease as "
                f"{self.holder[:18]}…; the webhook stamped its pod on it",
            )
            self.acquired.set()
            while not (self.pod_gone.is_set() or self.stop.is_set()):
                self.stop.wait(0.05)
        finally:
            # The pod is gone and this process with it: close the transport only. No
            # release, no renewal: that is what the controller has to repair.
            self.lease.close()


def rogue(cluster: Cluster, job_id: str, timeline: Timeline) -> ProcessSubmitter:
    """A submitter that runs elastic-blast without taking the Lease."""
    return ProcessSubmitter(cluster, "rogue (no Lease)", job_id, timeline, user=ROGUE_USER,
                            path="rogue", wrapped=False)  # fmt: skip
