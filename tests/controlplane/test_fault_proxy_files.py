"""The fault proxy's own files: the CA and kubeconfigs it writes live as long as it does."""

from __future__ import annotations

from pathlib import Path

from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy


def test_a_stopped_proxy_leaves_none_of_its_files_behind(control_plane: ControlPlane) -> None:
    with FaultProxy(control_plane) as proxy:
        kubeconfig = Path(proxy.kubeconfig("a-token", "someone"))
        written = {Path(proxy.ca_file), kubeconfig}
        assert all(path.is_file() for path in written)
    assert not any(path.exists() for path in written)
    assert not kubeconfig.parent.exists()
