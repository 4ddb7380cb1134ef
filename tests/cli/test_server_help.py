"""``python -m webhook --help`` and ``python -m controller --help`` explain the
server and its settings, and exit 0 without starting anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("server", ["webhook", "controller"])
def test_help_prints_the_settings_and_exits_without_starting(server: str) -> None:
    # No kubeconfig and no service account: a server that tried to start would
    # fail on API access with status 2 instead of printing help.
    env = {
        k: v for k, v in os.environ.items() if k not in {"KUBECONFIG", "KUBERNETES_SERVICE_HOST"}
    }
    env["ELB_GATE_METRICS_PORT_NUMBER"] = "1"  # a privileged port: binding it would fail loudly
    done = subprocess.run(
        [sys.executable, "-m", server, "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {server}")
    assert "BLAST_MAX_RUN_CONCURRENCY (default: 3)" in done.stdout
    assert "ELB_GATE_ENFORCEMENT (default: deny)" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize("server", ["webhook", "controller"])
def test_an_unknown_flag_is_a_usage_error_not_a_start(server: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", server, "--no-such-flag"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in done.stderr
