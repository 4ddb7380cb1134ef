"""Fixtures for controller tests that run against the API emulator in-process."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from controller.main import Controller, LeaderTiming
from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from tests.kube_emulator import Emulator
from tests.support.controller_process import ensure_controller_user, ensure_namespace

NS = "blast"


async def eventually(
    condition: Callable[[], Any], what: str, within: float = 20.0, interval: float = 0.05
) -> Any:
    """Poll ``condition`` (sync) until truthy; return its value or fail naming ``what``."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for: {what}")
        await asyncio.sleep(interval)


def controller_settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "namespaces": (NS,),
        "resync_seconds": 0.5,
        "metrics_port": 0,
        "bind_address": "127.0.0.1",
        "pod_name": "in-process",
        "finalizer_grace_seconds": 0,
    }
    base.update(overrides)
    return Settings(**base)


@pytest.fixture
async def controller_api(emulator: Emulator) -> AsyncIterator[KubeApi]:
    """A KubeApi authenticated as the controller's service account; namespace ``blast``."""
    ensure_namespace(emulator, NS, gated=True)
    config = KubeConfig.load(ensure_controller_user(emulator))
    async with KubeApi(config, timeout=5.0) as api:
        yield api


@contextlib.asynccontextmanager
async def running(
    api: KubeApi, settings: Settings, timing: LeaderTiming | None = None, **kw: Any
) -> AsyncIterator[Controller]:
    """A Controller running on this event loop until the block ends."""
    ctl = Controller(settings, api, timing=timing or LeaderTiming(3.0, 0.3), **kw)
    task = asyncio.create_task(ctl.run())
    try:
        await eventually(lambda: ctl.metrics_port or task.done(), "controller started")
        if task.done():
            task.result()
        yield ctl
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def events_for(emu: Emulator, reason: str, namespace: str = NS) -> list[dict[str, Any]]:
    return [e for e in emu.list("events", namespace) if e.get("reason") == reason]
