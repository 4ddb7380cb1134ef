from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.kube_emulator import Emulator, User


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    """One emulator per test module (tests use distinct names/namespaces)."""
    emulator = Emulator(users=[
        User.plain("alice", groups=["team"]),
        User.service_account("default", "openapi", pod="openapi-7f9", pod_uid="pod-uid-1"),
    ]).start()
    yield emulator
    emulator.stop()
    shutil.rmtree(emulator.state_dir, ignore_errors=True)
