"""Fixtures for the controller's integration tests on the real control plane.

The controller authenticates as its ServiceAccount (a token bound to a Pod of its own in
elb-system) and has exactly the RBAC of the shipped manifests. In-process controllers
(:func:`running`) reach the API server through a :class:`FaultProxy`, so a test can
inject faults and count calls; process tests use :class:`ControllerProcess`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from controller.server import Controller
from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.holders import free_leader_lease
from testbed.install import Installation
from testbed.waiting import wait_until_async
from testbed.webhook_process import WebhookProcess

IN_PROCESS = "controller-in-process"
"""The Pod the in-process controller's token is bound to."""

SHORT_LEASE_ENV = {
    "ELB_GATE_LEASE_MIN_DURATION_SECONDS": "1",
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": "0",
    # With no skew the derived exec timeout (TTL - 2 x skew) would equal the TTL, which
    # the settings refuse; neither server uses it.
    "ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS": "600",
}
"""Webhook and controller settings under which a Lease written with
``leaseDurationSeconds: 2`` expires two seconds after its last renewal (the webhook
stamps renewTime on its own clock: a Lease cannot be backdated, only aged)."""


@pytest.fixture(scope="module")
def short_lease_hook(control_plane: ControlPlane) -> Iterator[WebhookProcess]:
    """The real webhook with :data:`SHORT_LEASE_ENV`."""
    with WebhookProcess(control_plane, SHORT_LEASE_ENV) as proc:
        yield proc


@pytest.fixture(scope="module")
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the API server (faults cleared per test)."""
    with FaultProxy(control_plane) as p:
        yield p


@pytest.fixture
def fault_proxy(proxy: FaultProxy) -> Iterator[FaultProxy]:
    proxy.clear()
    yield proxy
    proxy.clear()


def controller_settings(namespace: str, **overrides: Any) -> Settings:
    """An in-process controller of ``namespace``: 0.5 s resync, a lone finalizer is an
    orphan at once, Leases judged without skew (as :data:`SHORT_LEASE_ENV`)."""
    base: dict[str, Any] = {
        "namespaces": (namespace,),
        "resync_seconds": 0.5,
        "metrics_port": 0,
        "bind_address": "127.0.0.1",
        "pod_name": IN_PROCESS,
        "pod_namespace": "elb-system",
        "finalizer_grace_seconds": 0,
        "clock_skew_seconds": 0,
        "submit_exec_timeout_seconds": 600,
        "leader_lease_seconds": 3.0,
        "leader_renew_seconds": 0.3,
    }
    base.update(overrides)
    return Settings.of(**base)


@pytest.fixture
async def controller_api(
    control_plane: ControlPlane, fault_proxy: FaultProxy
) -> AsyncIterator[KubeApi]:
    """A KubeApi as the controller's ServiceAccount, through the fault proxy."""
    free_leader_lease(control_plane)
    token = Installation.on(control_plane).identity("controller", IN_PROCESS).token
    config = KubeConfig.load(fault_proxy.kubeconfig(token, IN_PROCESS))
    async with KubeApi(config, timeout=5.0) as api:
        yield api
    free_leader_lease(control_plane)


@contextlib.asynccontextmanager
async def running(api: KubeApi, settings: Settings, **kw: Any) -> AsyncIterator[Controller]:
    """A Controller running on this event loop until the block ends."""
    ctl = Controller(settings, api, **kw)
    task = asyncio.create_task(ctl.run())
    try:
        await wait_until_async(lambda: ctl.metrics_port or task.done(), 30, "controller started")
        if task.done():
            task.result()
        yield ctl
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
