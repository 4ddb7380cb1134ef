"""A submitter on the control plane, doing what ``elastic-blast submit`` does under a submit path.

It holds the namespace's submit Lease through elb-gate's own client
(:class:`client.SubmitLease`, the protocol both submit paths speak) and
applies each Job with ``kubectl apply -f <file>`` as its user, in the order
ElasticBLAST applies them, stopping at the first refusal (ElasticBLAST's
``safe_exec`` raises on a failed ``kubectl``), or creates them through the API
(:meth:`Submitter.create`) where the kubectl output is not the point.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from client import SubmitLease
from elbgate.kube.config import KubeConfig
from elbgate.settings import GateSettings
from testbed.api import JsonObj
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until

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


class Submitter:
    """One user of one submit path in one gated namespace."""

    def __init__(
        self,
        cp: ControlPlane,
        namespace: str,
        user: str,
        workdir: Path | None = None,
        *,
        source: str = "dashboard",
        ttl_seconds: int | None = None,
    ) -> None:
        self.cp = cp
        self.namespace = namespace
        self.user = user
        self.workdir = workdir
        self.source = source
        gate = GateSettings()
        self.gate = gate if ttl_seconds is None else GateSettings(lease_ttl_seconds=ttl_seconds)
        self._lease: SubmitLease | None = None

    # -- the Lease ------------------------------------------------------------------

    @property
    def lease(self) -> SubmitLease:
        """This submitter's Lease client, opened on first use (again after :meth:`close`)."""
        if self._lease is None:
            config = KubeConfig.from_kubeconfig(self.cp.kubeconfig(self.user))
            self._lease = SubmitLease(
                self.namespace, gate=self.gate, config=config, source=self.source
            )
        return self._lease

    def try_acquire(self) -> bool:
        return bool(self.lease.acquire().acquired)

    def acquire(self, timeout: float = 120) -> Submitter:
        """Wait for the Lease (busy is normal: another submit is in progress)."""
        wait_until(self.try_acquire, timeout, f"{self.user} to acquire the submit Lease", 0.3)
        return self

    def release(self) -> None:
        self.lease.release()

    def close(self) -> None:
        if self._lease is not None:
            self._lease.close()
            self._lease = None

    @contextmanager
    def holding(self) -> Iterator[Submitter]:
        """The submit Lease, acquired (waiting while busy) and released on exit."""
        self.acquire()
        try:
            yield self
            self.release()
        finally:
            self.close()

    # -- the Jobs -------------------------------------------------------------------

    def create(self, *jobs: JsonObj) -> list[JsonObj]:
        """Create ``jobs`` in order through the API as this user (each through admission)."""
        api = self.cp.api(self.user)
        return [api.create(job) for job in jobs]

    def apply(self, body: dict[str, Any], kubeconfig: str | None = None) -> Applied:
        """``kubectl apply -f <name>.yaml`` as this user (or ``kubeconfig``'s identity)."""
        assert self.workdir is not None, "kubectl apply needs the submitter's workdir"
        name = body["metadata"]["name"]
        path = self.workdir / f"{name}.yaml"
        with _files:
            path.write_text(yaml.safe_dump(body, sort_keys=False))
        out = self.cp.kubectl(
            self.user, "-n", self.namespace, "apply", "-f", str(path), kubeconfig=kubeconfig
        )
        return Applied(name, str(path), out.returncode, out.stdout, out.stderr)

    def submit(self, bodies: Iterable[dict[str, Any]]) -> list[Applied]:
        """Apply in order; stop at the first refusal, as ``elastic-blast submit`` does."""
        done: list[Applied] = []
        for body in bodies:
            done.append(self.apply(body))
            if not done[-1].ok:
                break
        return done


def nothing_left(cp: ControlPlane, namespace: str, job_id: str) -> bool:
    """``kubectl get jobs -l elb-job-id=<id>``, as an operator runs it, finds no Job."""
    out = cp.kubectl("alice", "-n", namespace, "get", "jobs", "-l", f"elb-job-id={job_id}")
    return (
        out.returncode == 0
        and out.stderr.strip() == f"No resources found in {namespace} namespace."
    )


def complete(job: JsonObj | None) -> bool:
    """The Job controller wrote a ``Complete`` condition."""
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)
