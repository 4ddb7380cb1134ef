"""Fixtures for the integration tests: one emulator and one real webhook process per module."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator

import pytest

from tests.kube_emulator import Emulator, User
from tests.support.webhook_process import WebhookProcess

API_TIMEOUT_SECONDS = 2.0
"""The process's deadline per API call (ELB_GATE_API_TIMEOUT_SECONDS), well inside 5 s."""

_namespaces = itertools.count(1)


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    """An emulator with two people, the in-cluster submit path's SA, and a dashboard user."""
    emulator = Emulator(
        users=[
            User.plain("alice", groups=["team"]),
            User.plain("bob"),
            User.service_account("default", "openapi", pod="openapi-7f9", pod_uid="pod-uid-1"),
            User.service_account("default", "elb-submit"),
        ]
    ).start()
    try:
        yield emulator
    finally:
        emulator.stop()
        shutil.rmtree(emulator.state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def hook(emu: Emulator) -> Iterator[WebhookProcess]:
    """The real ``python -m webhook``, registered with ``emu``."""
    with WebhookProcess(emu, {"ELB_GATE_API_TIMEOUT_SECONDS": str(API_TIMEOUT_SECONDS)}) as proc:
        yield proc


@pytest.fixture
def ns(hook: WebhookProcess) -> str:
    """A fresh gated namespace for one test (its own Lease, its own census)."""
    return hook.gate_namespace(f"gated-{next(_namespaces)}")
