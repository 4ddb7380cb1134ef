"""Integration: with ELB_GATE_ORPHAN_POLICY=warn an orphan is flagged but never deleted,
and a finalizer that regains a companion is un-flagged."""

from __future__ import annotations

from elbgate.names import ORPHANED_SINCE_ANNOTATION
from tests.controller.test_processes import events, job, reconciles
from tests.kube_emulator import Emulator
from tests.support.controller_process import ControllerProcess, wait_until


def mark(emu: Emulator, name: str) -> str | None:
    annotations = emu.get("jobs", "warned", name)["metadata"].get("annotations") or {}
    return annotations.get(ORPHANED_SINCE_ANNOTATION)


def test_policy_warn_marks_and_warns_but_never_deletes(emulator: Emulator) -> None:
    env = {
        "ELB_GATE_ORPHAN_POLICY": "warn",
        "BLAST_FINALIZER_GRACE_SECONDS": "0",
        "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "0",
    }
    with ControllerProcess.start(emulator, name="ctl-w", namespaces=["warned"], env=env) as ctl:
        job(emulator, "warned", "fin-w", "finalizer", job_id="w1")
        wait_until(lambda: mark(emulator, "fin-w") is not None, "marked", 20, ctl)
        wait_until(lambda: events(emulator, "warned", "OrphanedFinalizer"), "warned", 20, ctl)
        seen = reconciles(ctl)
        wait_until(lambda: reconciles(ctl) >= seen + 3, "three more reconciles", 30, ctl)
        assert emulator.find("jobs", "warned", "fin-w") is not None
        assert not events(emulator, "warned", "OrphanedFinalizerDeleted")
        assert (
            "will not be deleted" in events(emulator, "warned", "OrphanedFinalizer")[0]["message"]
        )
        assert ctl.metric("elb_gate_orphaned_finalizers", {"namespace": "warned"}) == 1
        # Its batch work appears after all: no longer an orphan, so the mark goes.
        job(emulator, "warned", "blast-w", "blast", job_id="w1")
        wait_until(lambda: mark(emulator, "fin-w") is None, "un-marked", 20, ctl)
        wait_until(
            lambda: ctl.metric("elb_gate_orphaned_finalizers", {"namespace": "warned"}) == 0,
            "gauge back to 0",
            20,
            ctl,
        )
