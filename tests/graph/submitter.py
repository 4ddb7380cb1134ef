"""A submitter on the control plane, doing what ``elastic-blast submit`` does under a submit path.

It holds the namespace's submit Lease through elb-gate's own client
(:class:`client.SubmitLease`, the protocol both submit paths speak) and
applies each Job with ``kubectl apply -f <file>`` as its user, in the order
ElasticBLAST applies them, stopping at the first refusal (ElasticBLAST's
``safe_exec`` raises on a failed ``kubectl``).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client import SubmitLease
from elbgate.kube.config import KubeConfig
from elbgate.settings import GateSettings
from testbed.api import JsonObj
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from tests.graph.bodies import as_yaml, name

_files = threading.Lock()


@dataclass(frozen=True)
class Applied:
    """What ``kubectl apply -f <file>`` of one Job printed."""

    job: str
    path: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def warnings(self) -> list[str]:
        """The ``Warning: …`` lines kubectl printed (AdmissionReview warnings)."""
        return [line for line in self.stderr.splitlines() if line.startswith("Warning: ")]


class Submitter:
    """One user of one submit path in one gated namespace."""

    def __init__(
        self,
        cp: ControlPlane,
        namespace: str,
        user: str,
        workdir: Path,
        *,
        source: str = "dashboard",
        gate: GateSettings | None = None,
    ) -> None:
        self.cp = cp
        self.namespace = namespace
        self.user = user
        self.workdir = workdir
        self.lease = SubmitLease(
            namespace,
            gate=gate or GateSettings(),
            config=KubeConfig.from_kubeconfig(cp.kubeconfig(user)),
            source=source,
        )

    # -- the Lease ------------------------------------------------------------------

    def try_acquire(self) -> bool:
        return bool(self.lease.acquire().acquired)

    def acquire(self, timeout: float = 120) -> Submitter:
        """Wait for the Lease (busy is normal: another submit is in progress)."""
        wait_until(self.try_acquire, timeout, f"{self.user} to acquire the submit Lease", 0.3)
        return self

    def release(self) -> None:
        self.lease.release()

    def close(self) -> None:
        self.lease.close()

    # -- the Jobs -------------------------------------------------------------------

    def apply(self, body: dict[str, Any], kubeconfig: str | None = None) -> Applied:
        """``kubectl apply -f <name>.yaml`` as this user (or ``kubeconfig``'s identity)."""
        path = self.workdir / f"{name(body)}.yaml"
        with _files:
            path.write_text(as_yaml(body))
        out = self.cp.kubectl(
            self.user, "-n", self.namespace, "apply", "-f", str(path), kubeconfig=kubeconfig
        )
        return Applied(name(body), str(path), out.returncode, out.stdout, out.stderr)

    def submit(self, bodies: Iterable[dict[str, Any]]) -> list[Applied]:
        """Apply in order; stop at the first refusal, as ``elastic-blast submit`` does."""
        done: list[Applied] = []
        for body in bodies:
            done.append(self.apply(body))
            if not done[-1].ok:
                break
        return done


def search_jobs(cp: ControlPlane, namespace: str, job_id: str) -> subprocess.CompletedProcess[str]:
    """``kubectl get jobs -l elb-job-id=<id>`` as an operator runs it."""
    return cp.kubectl("alice", "-n", namespace, "get", "jobs", "-l", f"elb-job-id={job_id}")


def nothing_left(cp: ControlPlane, namespace: str, job_id: str) -> bool:
    """``kubectl get jobs`` finds no Job of the search."""
    out = search_jobs(cp, namespace, job_id)
    return (
        out.returncode == 0
        and out.stderr.strip() == f"No resources found in {namespace} namespace."
    )


def complete(job: JsonObj | None) -> bool:
    """The Job controller wrote a ``Complete`` condition."""
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def wait_complete(
    cp: ControlPlane, namespace: str, names: Iterable[str], timeout: float = 180
) -> None:
    """Wait until the Job controller has marked every named Job Complete."""
    for job in names:

        def done(job: str = job) -> bool:
            return complete(cp.admin.find("jobs", namespace, job))

        wait_until(
            done,
            timeout,
            f"Job {namespace}/{job} Complete",
            0.3,
        )


def running_pods(cp: ControlPlane, namespace: str, selector: str) -> list[JsonObj]:
    return [
        p
        for p in cp.admin.list("pods", namespace, label_selector=selector)
        if (p.get("status") or {}).get("phase") == "Running"
    ]
