"""The two existing submit paths as the reliability submitters drive them.

Each path is its Lease client, reproduced faithfully in :mod:`testbed.clients` (bodies
built the way each path builds them, expiry judged on its own clock with its skew
margin, never elb-gate's builders), plus what the path does around it while it holds
the Lease:

* :class:`DashboardPath`, the dashboard's Celery task: the raw-HTTP Lease client, a
  count of the active searches over raw HTTP, and the search's Jobs POSTed with the
  same bearer token;
* :class:`OpenApiPath`, the in-cluster OpenAPI service: the kubectl Lease client, a
  count through ``kubectl get jobs``, and the Jobs applied with ``kubectl apply`` (as
  ``elastic-blast submit`` applies its manifests).

Both count the way the paths count (the coordination note, §5.1), not with elb-gate's
census: the distinct ``elb-job-id`` of unfinished ``app=finalizer`` Jobs, unfinished
meaning no ``succeeded``, no ``completionTime`` and no ``True`` ``Complete``/``Failed``
condition.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

from testbed.clients import ClientError, DashboardLeaseClient, OpenApiLeaseClient
from testbed.controlplane import ControlPlane
from testbed.dashboard_jobs import unfinished
from testbed.reliability.calls import jobs_path, kubectl_code, request
from testbed.reliability.rig import SKEW_SECONDS


def client_count(finalizers: Iterable[Mapping[str, Any]]) -> int:
    """Active searches as both paths count them (from a LIST of ``app=finalizer`` Jobs)."""
    ids = {
        ((j.get("metadata") or {}).get("labels") or {}).get("elb-job-id")
        for j in finalizers
        if unfinished(j)
    }
    return len(ids - {None, ""})


class DashboardPath:
    """The dashboard: raw HTTPS with one bearer token for the Lease and the Jobs."""

    def __init__(self, cp: ControlPlane, token: str, namespace: str, *, ttl: int) -> None:
        self.namespace = namespace
        self.lease = DashboardLeaseClient(
            cp.server, cp.ca_file, token, namespace, ttl=ttl, skew=SKEW_SECONDS
        )
        self.api = cp.api_for_token(token)

    def count(self) -> int:
        query = {"labelSelector": "app=finalizer"}
        jobs = self.api.request("GET", jobs_path(self.namespace), query=query)
        return client_count(jobs["items"])

    def create_job(self, body: Mapping[str, Any]) -> int:
        """Create one Job: the HTTP status (200/201 created, 0 when nothing answered)."""
        return request(self.api, "POST", jobs_path(self.namespace), body)[0]


class OpenApiPath:
    """The OpenAPI service: kubectl with its Pod's ServiceAccount kubeconfig."""

    def __init__(self, cp: ControlPlane, kubeconfig: str, namespace: str, *, ttl: int) -> None:
        self.cp = cp
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.lease = OpenApiLeaseClient(
            kubeconfig,
            namespace,
            ttl=ttl,
            skew=SKEW_SECONDS,
            cache_dir=str(cp.state_dir / "kubectl-cache"),
        )

    def _kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.cp.kubectl(
            "", "-n", self.namespace, *args, input=input, kubeconfig=self.kubeconfig
        )

    def count(self) -> int:
        result = self._kubectl("get", "jobs", "-l", "app=finalizer", "-o", "json")
        if result.returncode != 0:
            raise ClientError(f"kubectl get jobs: {result.stderr.strip()}")
        return client_count(list(json.loads(result.stdout).get("items") or []))

    def create_job(self, body: Mapping[str, Any]) -> int:
        # elastic-blast applies its Job manifests with kubectl.
        return kubectl_code(self._kubectl("apply", "-f", "-", input=json.dumps(body)))
