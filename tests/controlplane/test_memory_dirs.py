"""etcd's data in memory (/dev/shm) does not outlive the control plane that made it.

A run's etcd directory held RAM until the machine restarted: one left behind per test
session and per benchmark adds up to the machine's memory, and a machine without swap
then thrashes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from testbed.controlplane import (
    ETCD_DIR_PREFIX,
    STALE_AFTER_SECONDS,
    ControlPlane,
    held_open,
    sweep_stale_etcd_dirs,
)

pytestmark = pytest.mark.timeout(600)


def _started() -> ControlPlane:
    cp = ControlPlane.start(nodes=())
    if cp.etcd_dir is None:
        cp.stop()
        pytest.fail("this machine has no writable /dev/shm: etcd's data stayed in the state dir")
    assert cp.etcd_dir.is_dir() and (cp.etcd_dir / "member").is_dir()
    return cp


def test_stop_removes_etcd_data_in_memory() -> None:
    cp = _started()
    etcd_dir = cp.etcd_dir
    cp.stop()
    assert etcd_dir is not None and not etcd_dir.exists()


def test_localkube_stopped_by_a_signal_removes_its_etcd_data_itself() -> None:
    cp = _started()
    etcd_dir = cp.etcd_dir
    assert cp.process is not None and etcd_dir is not None
    try:
        cp.process.send_signal(signal.SIGTERM)
        cp.process.wait(120)
        assert not etcd_dir.exists()  # before the Python side looked at it
    finally:
        cp.stop()


def test_a_killed_control_planes_data_is_removed_by_stop() -> None:
    cp = _started()
    etcd_dir = cp.etcd_dir
    assert cp.process is not None and etcd_dir is not None
    os.killpg(cp.process.pid, signal.SIGKILL)
    cp.process.wait(60)
    assert etcd_dir.exists()  # SIGKILL: localkube could not remove it
    cp.stop()
    assert not etcd_dir.exists()


def test_the_sweep_removes_only_directories_nothing_holds_open_and_not_new(
    tmp_path: Path,
) -> None:
    old = time.time() - STALE_AFTER_SECONDS - 60

    def make(name: str, mtime: float) -> Path:
        d = tmp_path / f"{ETCD_DIR_PREFIX}{name}"
        (d / "member" / "wal").mkdir(parents=True)
        (d / "member" / "wal" / "0.wal").write_bytes(b"x")
        os.utime(d, (mtime, mtime))
        return d

    stale = make("stale", old)
    held = make("held", old)
    fresh = make("fresh", time.time())
    other = tmp_path / "not-etcd"
    other.mkdir()
    os.utime(other, (old, old))
    with open(held / "member" / "wal" / "0.wal", "rb"):
        removed = sweep_stale_etcd_dirs(tmp_path)
    assert removed == [stale]
    assert not stale.exists()
    assert held.exists() and fresh.exists() and other.exists()


def test_a_live_control_planes_data_isheld_open_so_no_sweep_takes_it() -> None:
    """What the sweep relies on beyond the age guard: a running etcd holds files of its
    directory open however old it is."""
    cp = _started()
    try:
        etcd_dir = cp.etcd_dir
        assert etcd_dir is not None
        assert any(path.startswith(f"{etcd_dir}/") for path in held_open())
        assert cp.admin.find("namespaces", None, "default") is not None
    finally:
        cp.stop()
