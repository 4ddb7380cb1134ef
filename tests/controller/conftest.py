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
from testbed.webhook_process import SHORT_LEASES

IN_PROCESS = "controller-in-process"
"""The Pod the in-process controller's token is bound to."""


@pytest.fixture(scope="package")
def webhook_env() -> dict[str, str]:
    """The package's webhook ages Leases in seconds (:data:`SHORT_LEASES`)."""
    return SHORT_LEASES


@pytest.fixture
def fault_proxy(proxy: FaultProxy) -> Iterator[FaultProxy]:
    proxy.clear()
    yield proxy
    proxy.clear()


def controller_settings(namespace: str, **overrides: Any) -> Settings:
    """An in-process controller of ``namespace``: 0.5 s resync, a lone finalizer is an
    orphan at once, Leases judged without skew (as :data:`SHORT_LEASES`)."""
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
