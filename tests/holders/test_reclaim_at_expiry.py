"""A submit thread that died while its pod lives on leaves no trace in the cluster: its
Lease is reclaimed when it expires, to within a second."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from testbed import holders
from testbed.controlplane import ControlPlane
from testbed.holders import Reclaim, Stage
from testbed.webhook_process import WebhookProcess

TTL_SECONDS = 3
SKEW = timedelta(seconds=30)
"""BLAST_LEASE_CLOCK_SKEW_SECONDS, as shipped (webhook and controller)."""


@pytest.fixture(scope="module")
def hook(control_plane: ControlPlane) -> Iterator[WebhookProcess]:
    # The one departure from the defaults in this directory: the webhook accepts a
    # Lease of a few seconds (the shipped lower bound is 15 s, the default TTL 900 s),
    # so the expiry comes during the test. Expiry is still renewTime + duration + the
    # shipped 30 s skew, on the controller's own timer.
    with WebhookProcess(control_plane, {"ELB_GATE_LEASE_MIN_DURATION_SECONDS": "1"}) as proc:
        yield proc


@pytest.fixture(scope="module")
def stage(control_plane: ControlPlane, hook: WebhookProcess) -> Iterator[tuple[Stage, str]]:
    ns = hook.gate_namespace(control_plane.new_namespace("dead-thread"))
    with holders.controllers(control_plane, [ns]) as s:
        yield s, ns


def test_a_dead_submit_thread_in_a_live_pod_is_reclaimed_at_expiry_within_a_second(
    control_plane: ControlPlane, stage: tuple[Stage, str], record: list[Reclaim]
) -> None:
    on, ns = stage
    identity = holders.submitter_pod(control_plane, ns)
    holder = holders.acquire(control_plane, identity, ttl_seconds=TTL_SECONDS)
    try:
        on.noticed(holder)
        # The thread died: no renewal, no release; the pod and its container run on.
        expiry = holder.renewed[-1] + timedelta(seconds=TTL_SECONDS) + SKEW
        reclaim = on.reclaim_of(holder, "expired", expiry)
        record.append(reclaim)
        assert reclaim.evidence == "expired"
        assert reclaim.cleared_at >= expiry  # never before it expires
        assert reclaim.seconds <= 1.0
        pod = holders.pod(control_plane, identity)
        assert pod["status"]["phase"] == "Running"
        assert holders.container_status(pod, holders.HOLDER_CONTAINER)["restartCount"] == 0
    finally:
        holder.close()
