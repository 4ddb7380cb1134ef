"""Session-wide fixtures: one real Kubernetes control plane for the whole run.

Every integration test runs against ``localkube`` — etcd, kube-apiserver,
kube-controller-manager and kube-scheduler built from the official Kubernetes
modules (``make localkube``) — and isolates itself in namespaces of its own.
``ELB_GATE_CONTROL_PLANE=<dir>`` reuses one started by ``make cluster``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.controlplane import ControlPlane, kubectl_path


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """The session's control plane (started once, stopped at the end)."""
    cp = ControlPlane.for_session()
    try:
        yield cp
    finally:
        cp.stop()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which kubectl the exact-message tests use (built from the pinned release)."""
    import subprocess

    path = kubectl_path()
    if not path.exists():
        return [f"kubectl: {path} missing (make localkube)"]
    out = subprocess.run(
        [str(path), "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        import json

        version = json.loads(out.stdout)["clientVersion"]["gitVersion"]
    except (ValueError, KeyError):
        version = out.stdout.strip() or out.stderr.strip()
    return [f"kubectl: {version} ({path})"]
