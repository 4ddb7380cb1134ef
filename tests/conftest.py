"""Shared fixtures: one real Kubernetes control plane for the whole run, a fault proxy
in front of it and the real webhook for each module that asks for one.

Every integration test runs against ``localkube`` — etcd, kube-apiserver,
kube-controller-manager and kube-scheduler built from the official Kubernetes
modules (``make localkube``) — and isolates itself in namespaces of its own.
``ELB_GATE_CONTROL_PLANE=<dir>`` reuses one started by ``make cluster``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.controlplane import ControlPlane, kubectl_path
from testbed.faultproxy import FaultProxy
from testbed.install import Installation
from testbed.webhook_process import WebhookProcess


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """The session's control plane (started once, stopped at the end)."""
    cp = ControlPlane.for_session()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    """A fault proxy in front of the control plane's API server, one per module: a test
    that adds faults clears them (``proxy.clear()``)."""
    with FaultProxy(control_plane) as running:
        yield running


@pytest.fixture(scope="module")
def webhook_env() -> dict[str, str]:
    """What the module's (or package's) webhook runs with on top of the shipped settings:
    override this fixture, not ``hook``."""
    return {}


@pytest.fixture(scope="module")
def hook(control_plane: ControlPlane, webhook_env: dict[str, str]) -> Iterator[WebhookProcess]:
    """The real ``python -m webhook`` with :func:`webhook_env`, registered with the
    shipped configurations for the module."""
    with WebhookProcess(control_plane, webhook_env) as proc:
        yield proc


@pytest.fixture(scope="module")
def proxied_hook(
    control_plane: ControlPlane,
    proxy: FaultProxy,
    webhook_env: dict[str, str],
    request: pytest.FixtureRequest,
) -> Iterator[WebhookProcess]:
    """Like ``hook``, but reaching the API server through the module's ``proxy``, as its
    own ServiceAccount (a Pod named after the module). A module whose webhook must meet
    the proxy's faults overrides ``hook`` to return it."""
    pod = f"elb-gate-webhook-{_prefix(request)}"
    token = Installation.on(control_plane).identity("webhook", pod).token
    kubeconfig = proxy.kubeconfig(token, "webhook")
    with WebhookProcess(control_plane, webhook_env, pod=pod, kubeconfig=kubeconfig) as proc:
        yield proc


@pytest.fixture
def no_faults_left(proxy: FaultProxy) -> Iterator[None]:
    """Clears the module's ``proxy`` after the test (use it with ``usefixtures``)."""
    yield
    proxy.clear()


def _prefix(request: pytest.FixtureRequest) -> str:
    """A namespace prefix naming the test's module."""
    return request.path.stem.removeprefix("test_").replace("_", "-")


@pytest.fixture
def ns(control_plane: ControlPlane, hook: WebhookProcess, request: pytest.FixtureRequest) -> str:
    """A fresh gated namespace for one test (its own Lease, its own census) under the
    module's ``hook``, named after the test's module."""
    return hook.install.gate(control_plane.new_namespace(_prefix(request)))


@pytest.fixture
def fresh_ns(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of this test's own, not gated yet (seed searches, then gate it), deleted
    after the test."""
    name = control_plane.new_namespace(_prefix(request))
    yield name
    control_plane.admin.delete("namespaces", None, name)


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
