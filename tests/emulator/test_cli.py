"""The standalone emulator: state dir, kubeconfigs per user, service mapping, clean exit."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.kube_emulator.fixtures import KUBECTL

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.kubectl
def test_the_cli_writes_kubeconfigs_that_kubectl_can_use(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text(yaml.safe_dump([
        {"name": "dash", "token": "dash-token", "groups": ["dashboard"]},
        {"name": "openapi", "serviceAccount": {"namespace": "default", "name": "openapi",
                                               "pod": "p-1", "podUid": "u-1"}},
    ]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.kube_emulator", "--port", "0", "--state-dir",
         str(tmp_path / "state"), "--users", str(users), "--service",
         "elb-system/webhook=127.0.0.1:9443"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(5)]
        assert lines[0].startswith("serving https://127.0.0.1:")
        config = tmp_path / "state" / "kubeconfig-dash"
        assert f"kubeconfig (dash): {config}\n" in lines
        assert yaml.safe_load(config.read_text())["users"][0]["user"]["token"] == "dash-token"
        result = subprocess.run([KUBECTL, "--kubeconfig", str(config), "get", "namespaces",
                                 "-o", "name"], capture_output=True, text=True, timeout=60,
                                env={"KUBECACHEDIR": str(tmp_path / "cache"),
                                     "HOME": str(tmp_path)})
        assert result.stdout.split() == ["namespace/default", "namespace/kube-system"]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
