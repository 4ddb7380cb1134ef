"""The metrics/health endpoints, over a real aiohttp server."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from controller.http import Health, create_app
from controller.metrics import ControllerMetrics


class State:
    def __init__(self) -> None:
        self.synced = False
        self.metrics = ControllerMetrics()

    def health(self) -> Health:
        return Health(
            ready=lambda: self.synced,
            liveness=lambda: {"leader": True, "namespaces": {"blast": {"inUse": self.synced}}},
            metrics=self.metrics.render,
        )


async def test_readyz_is_503_until_the_caches_sync_and_healthz_is_always_ok(
    aiohttp_client: Any,
) -> None:
    state = State()
    client: TestClient[Any, Any] = await aiohttp_client(create_app(state.health()))
    assert (await client.get("/healthz")).status == 200
    resp = await client.get("/readyz")
    assert resp.status == 503 and "not synced" in await resp.text()
    state.synced = True
    assert (await client.get("/readyz")).status == 200


async def test_liveness_is_served_as_json(aiohttp_client: Any) -> None:
    state = State()
    state.synced = True
    client: TestClient[Any, Any] = await aiohttp_client(create_app(state.health()))
    resp = await client.get("/liveness")
    assert resp.content_type == "application/json"
    assert await resp.json() == {"leader": True, "namespaces": {"blast": {"inUse": True}}}


async def test_metrics_expose_the_contract_names(aiohttp_client: Any) -> None:
    state = State()
    state.metrics.record_reclaim("blast", "dead_holder")
    state.metrics.set_namespace_state(
        "blast",
        active_searches=2,
        ceiling=3,
        orphans=1,
        lease_expired=False,
        in_use=True,
        idle_seconds=0,
        computed_at=1.0,
    )
    state.metrics.set_leader(True)
    client: TestClient[Any, Any] = await aiohttp_client(create_app(state.health()))
    resp = await client.get("/metrics")
    text = await resp.text()
    assert resp.headers["Content-Type"].startswith("text/plain")
    for sample in (
        'elb_gate_leases_reclaimed_total{namespace="blast",reason="dead_holder"} 1.0',
        'elb_gate_active_searches{namespace="blast"} 2.0',
        'elb_gate_search_ceiling{namespace="blast"} 3.0',
        'elb_gate_orphaned_finalizers{namespace="blast"} 1.0',
        'elb_gate_in_use{namespace="blast"} 1.0',
        'elb_gate_lease_expired{namespace="blast"} 0.0',
        "elb_gate_leader 1.0",
    ):
        assert sample in text
