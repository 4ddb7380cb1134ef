"""What the system tier changes on the host is undone: after a stop, after a start
given up on, and after a crash (the next start undoes the dead run's ledger). And
nothing is routed off the machine: the stand-in's ranges are blackholed while the tier
runs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from testbed import controlplane
from testbed.system_tier import SYSTEM_NODES, SystemTier, host_differences, host_snapshot
from testbed.waiting import wait_until

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]

PAUSE = "localkube.local/pause:1"


def run_a_pod(t: SystemTier, name: str) -> None:
    t.cp.admin.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": PAUSE, "imagePullPolicy": "Never"}],
                "terminationGracePeriodSeconds": 1,
            },
        }
    )

    def running() -> bool:
        pod = t.cp.admin.get("pods", "default", name)
        return (pod.get("status") or {}).get("phase") == "Running"

    wait_until(running, 120, f"Pod {name} Running on a real node")


def differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, object]:
    """What this session's runs left changed on the host (other live runs' own
    footprint aside; with none, every item), said when something was left out."""
    others = sorted(set(before["others"]["ids"]) | set(after["others"]["ids"]))
    if others:
        print(
            f"\nSYSTEM-TIER host check: other runs live on this host ({', '.join(others)}): "
            "their own footprint and the shared kernel parameters not compared"
        )
    return host_differences(before, after)


def test_a_stop_restores_every_change_on_the_host(host_before: dict[str, Any]) -> None:
    t = SystemTier.start(SYSTEM_NODES[:1])
    try:
        run_a_pod(t, "held")
        during = host_snapshot()
        routes = str(during["routes"])
        for cidr in t.system["blackholed"]:
            assert f"blackhole {cidr}" in routes
        assert t.system["bridge"] in during["links"]
        # A Pod's traffic to the stand-in's ranges has no route off the machine.
        probe = subprocess.run(
            ["ip", "route", "get", "10.244.3.7"], capture_output=True, text=True, check=False
        )
        assert probe.returncode != 0 or "blackhole" in probe.stdout, probe.stdout
    finally:
        t.stop()
    assert differences(host_before, host_snapshot()) == {}


def test_a_start_given_up_on_restores_every_change_on_the_host(
    host_before: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted once the tier is up but before start() returned (Ctrl-C, or its
    deadline passing just then): localkube is stopped as stop() stops it, and undoes
    its changes itself rather than leaving them to the next run."""
    wait_until_ready = controlplane.wait_until

    def interrupted(*args: Any) -> None:
        wait_until_ready(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(controlplane, "wait_until", interrupted)
    state_dirs = set(Path(tempfile.gettempdir()).glob("localkube-*"))
    with pytest.raises(KeyboardInterrupt):
        SystemTier.start(SYSTEM_NODES[:1])
    monkeypatch.undo()
    try:
        assert differences(host_before, host_snapshot()) == {}
    finally:  # the state directory a failed start keeps for its log
        for left in set(Path(tempfile.gettempdir()).glob("localkube-*")) - state_dirs:
            shutil.rmtree(left, ignore_errors=True)


def test_the_next_start_undoes_what_a_killed_run_left(host_before: dict[str, Any]) -> None:
    crashed = SystemTier.start(SYSTEM_NODES[:1])
    run_a_pod(crashed, "orphan")
    bridge = crashed.system["bridge"]
    assert crashed.cp.process is not None
    os.killpg(crashed.cp.process.pid, signal.SIGKILL)  # no teardown at all
    crashed.cp.process.wait(30)
    left = host_snapshot()
    assert bridge in left["links"]
    assert Path(crashed.system["ledger"]).exists()
    # The containers outlive their node's processes: their shims are detached.
    nxt = SystemTier.start(SYSTEM_NODES[:1])
    try:
        assert bridge not in host_snapshot()["links"] or nxt.system["bridge"] == bridge
        assert (
            not Path(crashed.system["ledger"]).exists()
            or nxt.system["ledger"] == crashed.system["ledger"]
        )
    finally:
        nxt.stop()
        crashed.cp.stop()  # its directory
    assert differences(host_before, host_snapshot()) == {}
