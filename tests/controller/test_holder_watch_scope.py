"""What the controller asks the API server for, to see holder pods: one name-scoped watch
per stamped pod and per node such a pod runs on — never every Pod or Node — and a reclaim
that follows a watch event at once, not the resync.

Runs against a recording stand-in for the API endpoints involved (tests/controller/fake_api.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.apply import Applier
from controller.cache import Cache, Kind
from controller.holder_watch import HolderWatches
from controller.metrics import ControllerMetrics
from controller.reconciler import Reconciler
from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.lease import format_microtime
from elbgate.names import lease_name
from elbgate.settings import Settings
from testbed.waiting import wait_until_async
from tests.builders import NODE, lease_doc, node_doc, pod_doc
from tests.controller.fake_api import FakeApi

POD_NS, POD = "elb", "elb-openapi-7c9d8f-x2x4k"
UID = "0d6f7a9e-3c1b-4d2e-9f80-1a2b3c4d5e6f"


def holder_pod(**kw: Any) -> dict[str, Any]:
    return pod_doc(name=POD, namespace=POD_NS, uid=UID, **kw)


@pytest.fixture
async def fake() -> AsyncIterator[FakeApi]:
    async with FakeApi().serving() as api:
        yield api


@pytest.fixture
async def api(fake: FakeApi) -> AsyncIterator[KubeApi]:
    async with KubeApi(KubeConfig(host=fake.host), timeout=2.0) as client:
        yield client


@contextlib.asynccontextmanager
async def holder_watches(api: KubeApi, changed: list[str]) -> AsyncIterator[HolderWatches]:
    watches = HolderWatches(api, ControllerMetrics(), changed.append, watch_timeout_seconds=60)
    try:
        yield watches
    finally:
        await watches.close()


def assert_name_scoped(fake: FakeApi) -> None:
    """Every pod/node LIST or WATCH names its one object; no cluster-wide pod request."""
    reads = [
        r
        for r in fake.requests
        if r.method == "GET" and r.path.rsplit("/", 1)[-1] in ("pods", "nodes")
    ]
    assert reads, "no pod or node was listed at all"
    for r in reads:
        assert r.query.get("fieldSelector", "").startswith("metadata.name="), r
        assert r.path != "/api/v1/pods", r  # never every Pod of the cluster


async def test_a_stamped_pod_and_its_node_are_watched_by_name_and_nothing_else(
    fake: FakeApi, api: KubeApi
) -> None:
    fake.put("pods", holder_pod(), "ADDED")
    fake.put("pods", pod_doc(name="bystander", namespace=POD_NS, uid="b"), "ADDED")
    fake.put("nodes", node_doc(), "ADDED")
    changed: list[str] = []
    async with holder_watches(api, changed) as watches:
        watches.want("blast", (POD_NS, POD))
        await wait_until_async(
            lambda: watches.seen(POD_NS, POD).node is not None, 30, "pod and node seen"
        )
        # Each watch opens just after its LIST answered (the view is filled by the LIST).
        await wait_until_async(lambda: fake.open_watches("nodes"), 30, "the node watch open")
        assert fake.open_watches("pods") == [(POD_NS, POD)]
        assert fake.open_watches("nodes") == [("", NODE)]
        assert {(r.path, r.query["fieldSelector"], r.watch) for r in fake.requests} == {
            (f"/api/v1/namespaces/{POD_NS}/pods", f"metadata.name={POD}", False),
            (f"/api/v1/namespaces/{POD_NS}/pods", f"metadata.name={POD}", True),
            ("/api/v1/nodes", f"metadata.name={NODE}", False),
            ("/api/v1/nodes", f"metadata.name={NODE}", True),
        }
        assert watches.seen(POD_NS, POD).uid == UID
        assert "blast" in changed
    assert_name_scoped(fake)


async def test_a_change_to_the_pod_or_its_node_reaches_the_namespace_at_once(
    fake: FakeApi, api: KubeApi
) -> None:
    fake.put("pods", holder_pod(), "ADDED")
    fake.put("nodes", node_doc(), "ADDED")
    changed: list[str] = []
    async with holder_watches(api, changed) as watches:
        watches.want("blast", (POD_NS, POD))
        await wait_until_async(lambda: watches.seen(POD_NS, POD).node is not None, 30, "synced")
        changed.clear()
        fake.put("pods", holder_pod(deleting=datetime.now(UTC) + timedelta(seconds=30)))
        await wait_until_async(lambda: changed, 30, "the namespace told of the pod change")
        seen = watches.seen(POD_NS, POD)
        assert seen.pod is not None and seen.pod.deleting_at is not None
        changed.clear()
        fake.put("nodes", node_doc(ready="Unknown", since=datetime.now(UTC)))
        await wait_until_async(lambda: changed, 30, "the namespace told of the node change")
        node = watches.seen(POD_NS, POD).node
        assert node is not None and node.ready == "Unknown"
        fake.put("pods", holder_pod(), "DELETED")
        await wait_until_async(lambda: watches.seen(POD_NS, POD).state == "absent", 30, "deleted")
        # All of it through the watches: each object was listed once.
        assert len([r for r in fake.of("pods") if not r.watch]) == 1
        assert len([r for r in fake.of("nodes") if not r.watch]) == 1


async def test_watches_follow_the_stamps_and_stop_when_no_stamp_names_them(
    fake: FakeApi, api: KubeApi
) -> None:
    fake.put("pods", holder_pod(), "ADDED")
    fake.put("pods", pod_doc(name="worker-1", namespace=POD_NS, uid="w1", node="n2"), "ADDED")
    async with holder_watches(api, []) as watches:
        watches.want("blast", (POD_NS, POD))
        watches.want("blast-b", (POD_NS, POD))  # two Leases, one pod: one watch
        await wait_until_async(lambda: fake.open_watches("nodes") == [("", NODE)], 30, "watching")
        assert fake.open_watches("pods") == [(POD_NS, POD)]
        watches.want("blast", (POD_NS, "worker-1"))  # a new holder in one namespace
        await wait_until_async(lambda: len(fake.open_watches("pods")) == 2, 30, "both pods watched")
        watches.want("blast-b", None)  # released
        await wait_until_async(
            lambda: (
                fake.open_watches("pods") == [(POD_NS, "worker-1")]
                and fake.open_watches("nodes") == [("", "n2")]
            ),
            30,
            "only the live stamp's pod and node watched",
        )
        assert watches.watched() == ([(POD_NS, "worker-1")], ["n2"])
        watches.want("blast", None)
        await wait_until_async(
            lambda: not fake.open_watches("pods") and not fake.open_watches("nodes"),
            30,
            "nothing watched once no Lease is held",
        )
    assert_name_scoped(fake)


async def test_a_pod_not_listed_yet_is_unknown_never_gone(api: KubeApi) -> None:
    async with holder_watches(api, []) as watches:
        assert watches.seen(POD_NS, POD).state == "unknown"  # not even wanted
        watches.want("blast", (POD_NS, POD))
        assert watches.seen(POD_NS, POD).state == "unknown"  # wanted, LIST not back yet
        await wait_until_async(
            lambda: watches.seen(POD_NS, POD).state == "absent", 30, "listed: absent"
        )


@contextlib.asynccontextmanager
async def reconciling(api: KubeApi) -> AsyncIterator[tuple[HolderWatches, ControllerMetrics]]:
    """A leader's reconciler over ``api`` whose namespace ``blast`` holds a Lease stamped
    with the holder pod, renewed 2 s ago. A one-hour resync: whatever happens within a
    test happened because of watch events."""
    settings = Settings.of(namespaces=("blast",), resync_seconds=3600)
    metrics = ControllerMetrics()
    cache = Cache(["blast"])
    applier = Applier(api, cache, metrics, "test", lambda: True, lambda: datetime.now(UTC))
    reconciler: Reconciler
    watches = HolderWatches(api, metrics, lambda ns: reconciler.mark_dirty(ns))
    reconciler = Reconciler(
        settings.gate,
        settings.controller,
        cache,
        api,
        applier,
        metrics,
        lambda: True,
        lambda: datetime.now(UTC),
        holders=watches,
    )
    cache._on_change = reconciler.mark_dirty
    task = asyncio.create_task(reconciler.run())
    try:
        renewed = datetime.now(UTC) - timedelta(seconds=2)
        lease = lease_doc(pod=f"{POD_NS}/{POD}/{UID}", renew_time=format_microtime(renewed))
        cache.replace(Kind.JOBS, "blast", [])
        cache.replace(Kind.CONFIGMAPS, "blast", [])
        cache.replace(Kind.ADMISSIONS, "blast", [])
        cache.replace(Kind.LEASES, "blast", [lease])
        await wait_until_async(
            lambda: watches.seen(POD_NS, POD).state != "unknown", 30, "holder watched"
        )
        yield watches, metrics
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watches.close()


def lease_patches(fake: FakeApi) -> list[dict[str, Any]]:
    return [b for p, b in fake.patches if p.endswith(f"/leases/{lease_name('blast')}")]


async def test_a_terminating_holder_is_reclaimed_on_the_watch_event_not_the_resync(
    fake: FakeApi, api: KubeApi
) -> None:
    fake.put("pods", holder_pod(), "ADDED")
    fake.put("nodes", node_doc(), "ADDED")
    async with reconciling(api) as (watches, metrics):
        await wait_until_async(
            lambda: watches.seen(POD_NS, POD).node is not None, 30, "node watched"
        )
        await asyncio.sleep(0.3)
        assert not lease_patches(fake)  # alive: left alone
        deleted_at = datetime.now(UTC)
        fake.put("pods", holder_pod(deleting=deleted_at + timedelta(seconds=30), grace=30))
        await wait_until_async(lambda: lease_patches(fake), 60, "the Lease released")
        (patch,) = lease_patches(fake)
        assert patch["spec"] == {"holderIdentity": None}
        assert patch["metadata"]["resourceVersion"] == "41"  # a CAS on what was judged
        assert len([r for r in fake.of("pods") if not r.watch]) == 1  # no relist, no poll
        sample = metrics.registry.get_sample_value(
            "elb_gate_reclaim_after_evidence_seconds_count", {"evidence": "pod_terminating"}
        )
        assert sample == 1


async def test_a_deleted_holder_is_confirmed_with_a_fresh_get_then_reclaimed(
    fake: FakeApi, api: KubeApi
) -> None:
    fake.put("pods", holder_pod(), "ADDED")
    async with reconciling(api):
        fake.put("pods", holder_pod(), "DELETED")
        await wait_until_async(lambda: lease_patches(fake), 60, "the Lease released")
        gets = [r for r in fake.requests if r.path == f"/api/v1/namespaces/{POD_NS}/pods/{POD}"]
        assert gets  # the 404 confirmed what the watch said


async def test_a_watch_that_says_gone_while_a_get_finds_the_holder_reclaims_nothing(
    fake: FakeApi, api: KubeApi
) -> None:
    fake.put("pods", holder_pod(), "ADDED")
    async with reconciling(api):
        # The watch reports a DELETED the store does not reflect (a stale or reordered
        # stream): the GET before acting finds the holder's pod, same uid, alive.
        fake.emit("pods", holder_pod(), "DELETED")
        path = f"/api/v1/namespaces/{POD_NS}/pods/{POD}"
        await wait_until_async(
            lambda: [r for r in fake.requests if r.path == path], 30, "confirmed"
        )
        await asyncio.sleep(0.3)
        assert not lease_patches(fake)


async def test_a_failed_confirmation_is_retried_within_seconds_not_at_the_resync(
    fake: FakeApi, api: KubeApi
) -> None:
    fake.put("pods", holder_pod(), "ADDED")
    async with reconciling(api):
        fake.failing_gets = 2  # the API answers 503 to the first two confirming GETs
        fake.put("pods", holder_pod(), "DELETED")
        await wait_until_async(lambda: lease_patches(fake), 60, "the Lease released")
        path = f"/api/v1/namespaces/{POD_NS}/pods/{POD}"
        assert len([r for r in fake.requests if r.path == path]) >= 3  # two failed, one 404
