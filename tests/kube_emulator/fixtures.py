"""pytest plugin: the `emulator` fixture and a `kubectl` helper for the real binary."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from .emulator import Emulator
from .users import User

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def kubectl(emu: Emulator, user: str, *args: str, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real kubectl as `user` against `emu` (text mode, output captured)."""
    env = {**os.environ, "KUBECACHEDIR": str(emu.state_dir / "kubectl-cache"),
           "KUBECONFIG": emu.kubeconfig(user)}
    return subprocess.run([KUBECTL, "--kubeconfig", emu.kubeconfig(user), *args], input=input,
                          capture_output=True, text=True, env=env, timeout=timeout, check=False)


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A started emulator with users `alice` (group `team`) and SA `default/openapi`."""
    emu = Emulator(users=[
        User.plain("alice", groups=["team"]),
        User.service_account("default", "openapi", pod="openapi-7f9", pod_uid="pod-uid-1"),
    ]).start()
    try:
        yield emu
    finally:
        emu.stop()
        shutil.rmtree(emu.state_dir, ignore_errors=True)
