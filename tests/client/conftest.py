"""Fixtures for the submit-path client: an API transport to the emulator and small settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from elbgate.client.sync_kube import SyncKube
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from tests.kube_emulator import Emulator

NS = "default"
LEASE = "elb-blast-submit-default"


def small_settings(**env: str) -> Settings:
    """TTL 15 s (the guard's minimum), 1 s skew, so expiry is reachable in a test."""
    base = {"BLAST_SUBMIT_LEASE_TTL_SECONDS": "15", "BLAST_LEASE_CLOCK_SKEW_SECONDS": "1"}
    return Settings.from_env({**base, **env})


def search_job(job_id: str, app: str = "blast", name: str | None = None) -> dict[str, Any]:
    """A minimal batch/v1 Job of one search."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name or f"{app}-{job_id}",
            "namespace": NS,
            "labels": {"app": app, "elb-job-id": job_id},
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c", "image": "busybox"}],
                    "restartPolicy": "Never",
                }
            }
        },
    }


def complete(emu: Emulator, name: str) -> None:
    """Mark a Job succeeded, as the Job controller would."""
    job = emu.get("jobs", NS, name)
    job["status"] = {"succeeded": 1, "completionTime": "2026-01-01T00:00:00Z"}
    emu.update_status(job)


def holder_of(emu: Emulator) -> str:
    return str(emu.get("leases", NS, LEASE)["spec"].get("holderIdentity") or "")


@pytest.fixture
def kube(emulator: Emulator) -> Iterator[SyncKube]:
    transport = SyncKube(KubeConfig.from_kubeconfig(emulator.kubeconfig("alice")), timeout=5)
    try:
        yield transport
    finally:
        transport.close()
