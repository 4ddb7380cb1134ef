"""Single API calls as a given identity, raw HTTPS or kubectl, answered by HTTP status.

Returns the status (0 when nothing answered) so a test can count outcomes by code;
kubectl's status is read from its ``Error from server (Reason)`` line.
"""

from __future__ import annotations

from typing import Any

from testbed.api import ApiError
from testbed.controlplane import ControlPlane
from testbed.reliability.paths import kubectl_code


def lease_path(namespace: str, name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def http(
    cp: ControlPlane, token: str, method: str, path: str, body: Any = None
) -> tuple[int, dict[str, Any]]:
    """One HTTPS call with a bearer token: (status, decoded body)."""
    try:
        answer = cp.api_for_token(token).request(method, path, body)
    except ApiError as exc:
        return exc.status, dict(exc.body)
    except OSError:
        return 0, {}
    return (201 if method == "POST" else 200), dict(answer) if isinstance(answer, dict) else {}


def kubectl_status(
    cp: ControlPlane, kubeconfig: str, *args: str, input: str | None = None
) -> tuple[int, str]:
    """Run kubectl with ``kubeconfig``: (200 on success, else the code its error names; stderr)."""
    result = cp.kubectl("", *args, input=input, kubeconfig=kubeconfig)
    return kubectl_code(result), result.stderr
