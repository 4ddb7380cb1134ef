"""A write that was sent finishes its record even when leadership is lost mid-flight."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.actions import ReleaseLease
from controller.apply import Applier, Outcome
from controller.cache import Cache
from controller.metrics import ControllerMetrics
from testbed.waiting import wait_until_async

NS = "blast"


class SlowApi:
    """Answers the Lease PATCH only when told to; records Events."""

    def __init__(self) -> None:
        self.patch_sent = asyncio.Event()
        self.answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.events: list[dict[str, Any]] = []

    async def merge_patch(self, url_path: str, patch: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.patch_sent.set()
        return await self.answer

    async def create(self, url_path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.events.append(body)
        return body


async def test_a_reclaim_cancelled_by_lost_leadership_is_still_logged_counted_and_evented(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The leader sends the PATCH that clears a dead holder, then loses leadership:
    # the reconciler cancels the in-flight apply. The PATCH may still land, so its
    # log line, metric and Event must not be lost with the cancellation.
    caplog.set_level(logging.INFO)
    api = SlowApi()
    metrics = ControllerMetrics()
    applier = Applier(
        api,  # type: ignore[arg-type]
        Cache([NS]),
        metrics,
        "ctl-0",
        lambda: True,
        lambda: datetime.now(UTC),
    )
    action = ReleaseLease(
        NS, "elb-blast-submit-blast", "41", "openapi-1", "dead_holder", "its pod is gone"
    )
    caller = asyncio.create_task(applier.apply(action))
    await asyncio.wait_for(api.patch_sent.wait(), 5)
    caller.cancel()  # leadership lost while the PATCH is in flight
    api.answer.set_result(
        {"metadata": {"name": action.name, "uid": "u-1", "resourceVersion": "42"}}
    )
    with pytest.raises(asyncio.CancelledError):
        await caller
    await wait_until_async(
        lambda: api.events, 60, "the started write to finish on its own", interval=0.01
    )
    assert [e["reason"] for e in api.events] == ["LeaseHolderGoneReclaimed"]
    assert any(r.getMessage() == "submit Lease reclaimed" for r in caplog.records)
    assert (
        metrics.registry.get_sample_value(
            "elb_gate_leases_reclaimed_total", {"namespace": NS, "reason": "dead_holder"}
        )
        == 1
    )


async def test_no_write_starts_without_leadership() -> None:
    api = SlowApi()
    applier = Applier(
        api,  # type: ignore[arg-type]
        Cache([NS]),
        ControllerMetrics(),
        "ctl-0",
        lambda: False,
        lambda: datetime.now(UTC),
    )
    action = ReleaseLease(NS, "elb-blast-submit-blast", "41", "h", "expired", "expired")
    assert await applier.apply(action) is Outcome.NOT_LEADER
    assert not api.patch_sent.is_set()
