"""Small synchronous API calls as a given emulator user: raw HTTPS and kubectl.

Returns the HTTP status (0 when nothing answered) so a test can count outcomes by
code. kubectl's status is read from its ``Error from server (Reason)`` line.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl

KUBECTL_REASONS: dict[str, int] = {
    "(AlreadyExists)": 409,
    "(Conflict)": 409,
    "(Forbidden)": 403,
    "(TooManyRequests)": 429,
    "(ServiceUnavailable)": 503,
    "(Invalid)": 422,
    "(InternalError)": 500,
    "(NotFound)": 404,
}


def lease_path(namespace: str, name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def http(
    emu: Emulator, user: str, method: str, path: str, body: Any = None, timeout: float = 30
) -> tuple[int, dict[str, Any]]:
    """One HTTPS call as ``user``: (status, decoded body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(emu.url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {emu.token(user)}")
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    ctx = ssl.create_default_context(cafile=emu.ca_file)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw or b"{}")
        except ValueError:
            return err.code, {"raw": raw.decode(errors="replace")}
    except (urllib.error.URLError, OSError):
        return 0, {}


def kubectl_status(
    emu: Emulator, user: str, *args: str, input: str | None = None
) -> tuple[int, str]:
    """Run kubectl as ``user``: (200 on success, else the code its error names; stderr)."""
    result = kubectl(emu, user, *args, input=input)
    if result.returncode == 0:
        return 200, result.stderr
    for marker, code in KUBECTL_REASONS.items():
        if marker in result.stderr:
            return code, result.stderr
    return 0, result.stderr
