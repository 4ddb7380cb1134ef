"""Single API calls as a given identity, raw HTTPS or kubectl, answered by HTTP status.

Returns the status (0 when nothing answered) so a test can count outcomes by code;
kubectl's status is read from its ``Error from server (Reason)`` line.
"""

from __future__ import annotations

import subprocess
from typing import Any

import urllib3

from testbed.api import Api, ApiError, Resource
from testbed.controlplane import ControlPlane

lease_path = Resource("/apis/coordination.k8s.io/v1", "leases", "Lease", namespaced=True).path
jobs_path = Resource("/apis/batch/v1", "jobs", "Job", namespaced=True).path


def request(api: Api, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    """One HTTPS call as ``api``'s identity: (status, decoded body)."""
    try:
        answer = api.request(method, path, body)
    except ApiError as exc:
        return exc.status, dict(exc.body)
    except (OSError, urllib3.exceptions.HTTPError):
        return 0, {}
    return (201 if method == "POST" else 200), dict(answer) if isinstance(answer, dict) else {}


KUBECTL_CODES: tuple[tuple[str, int], ...] = (
    ("(AlreadyExists)", 409), ("(Conflict)", 409), ("Operation cannot be fulfilled", 409),
    ("(Forbidden)", 403), ("(TooManyRequests)", 429), ("(ServiceUnavailable)", 503),
    ("(Invalid)", 422), ("(InternalError)", 500), ("(NotFound)", 404), ("(BadRequest)", 400),
)  # fmt: skip


def kubectl_code(result: subprocess.CompletedProcess[str]) -> int:
    """The HTTP status a kubectl run stands for: 200, or the one its error line names."""
    if result.returncode == 0:
        return 200
    for marker, code in KUBECTL_CODES:
        if marker in result.stderr:
            return code
    return 0


def kubectl_status(cp: ControlPlane, kubeconfig: str, *args: str, input: str | None = None) -> int:
    """Run kubectl with ``kubeconfig``: 200 on success, else the code its error names."""
    return kubectl_code(cp.kubectl("", *args, input=input, kubeconfig=kubeconfig))
