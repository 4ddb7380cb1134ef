"""What the controller asks the API server for, to see holder pods: one name-scoped watch
per stamped pod and per node such a pod runs on — never every Pod or Node — and a reclaim
that follows a watch event at once, not the resync.

On the real control plane, as the controller's ServiceAccount through the fault proxy,
which lists every request and says which watches are open; its faults fail the
confirming GETs, or open a watch with a deletion the store does not reflect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from controller.apply import Applier
from controller.cache import Cache, Kind
from controller.holder_watch import HolderWatches
from controller.metrics import ControllerMetrics
from controller.reconciler import Reconciler
from elbgate.kube.api import KubeApi
from elbgate.lease import format_microtime
from elbgate.names import lease_name
from elbgate.settings import Settings
from testbed.api import JsonObj
from testbed.audit_log import requests_to
from testbed.controller_process import CONTROLLER_USER
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.holders import NODE_LABEL, node_not_ready, own_node, submitter_pod
from testbed.install import Installation
from testbed.kubelet_stand_in import STOP_SECONDS
from testbed.waiting import wait_until_async
from tests.builders import lease_doc


@dataclass(frozen=True)
class Scene:
    """A Running holder pod on a Node of its own, in a namespace bound as a gated one
    (where the controller may read pods: docs/holder-gone.md, RBAC), which holds the
    Lease too."""

    cp: ControlPlane
    proxy: FaultProxy
    ns: str
    pod: str
    uid: str
    node: str
    first: int
    """The proxy's requests before this test's."""

    def pod_on(self, node: str) -> str:
        """Another Running pod in the holder's namespace, on ``node``."""
        return submitter_pod(self.cp, self.ns, node_selector={NODE_LABEL: node}).pod

    def reads(self) -> list[tuple[str, str, bool]]:
        """This test's pod and node reads: (path, fieldSelector, watch)."""
        out = []
        for method, path_qs in self.proxy.requests[self.first :]:
            url = urlsplit(path_qs)
            if method == "GET" and url.path.rsplit("/", 1)[-1] in ("pods", "nodes"):
                query = parse_qs(url.query)
                selector = query.get("fieldSelector", [""])[0]
                out.append((url.path, selector, query.get("watch", [""])[0] in ("1", "true")))
        return out

    def gets(self, name: str) -> list[str]:
        """This test's GETs of one pod (the confirmations)."""
        path = f"/api/v1/namespaces/{self.ns}/pods/{name}"
        return [p for m, p in self.proxy.requests[self.first :] if m == "GET" and p == path]

    def open_watches(self, resource: str) -> list[tuple[str, str]]:
        """This test's watches of ``resource`` open now: (namespace, name selected)."""
        mine = {p for _, p in self.proxy.requests[self.first :]}
        out = []
        for path_qs, streams in list(self.proxy.watching.items()):
            url = urlsplit(path_qs)
            if streams > 0 and path_qs in mine and url.path.endswith(f"/{resource}"):
                ns = url.path.partition("/namespaces/")[2].partition("/")[0]
                selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                out.append((ns, selector.removeprefix("metadata.name=")))
        return sorted(out)

    def assert_name_scoped(self) -> None:
        """Every pod/node LIST or WATCH names its one object; no cluster-wide pod request."""
        reads = self.reads()
        assert reads, "no pod or node was listed at all"
        for path, selector, _watch in reads:
            assert selector.startswith("metadata.name="), (path, selector)
            assert path != "/api/v1/pods", path  # never every Pod of the cluster

    def lease_patches(self) -> list[JsonObj]:
        """The controller's PATCHes of the submit Lease, as the API server recorded them."""
        name = lease_name(self.ns)
        patches = requests_to(self.cp.audit_events(), "leases", self.ns, name, user=CONTROLLER_USER)
        return [e["requestObject"] for e in patches if e.get("verb") == "patch"]


@pytest.fixture
def scene(control_plane: ControlPlane, fault_proxy: FaultProxy, fresh_ns: str) -> Iterator[Scene]:
    cp = control_plane
    Installation.on(cp).gate(fresh_ns, label=False)  # its RoleBindings, not the webhook's label
    with own_node(cp) as node:
        # The holder's process takes long to stop: deleted with a grace, it stays Terminating.
        pod = submitter_pod(
            cp, fresh_ns, node_selector={NODE_LABEL: node}, annotations={STOP_SECONDS: "300"}
        )
        first = len(fault_proxy.requests)
        yield Scene(cp, fault_proxy, fresh_ns, pod.pod, pod.pod_uid, node, first)


@contextlib.asynccontextmanager
async def holder_watches(api: KubeApi, changed: list[str]) -> AsyncIterator[HolderWatches]:
    watches = HolderWatches(api, ControllerMetrics(), changed.append, watch_timeout_seconds=60)
    try:
        yield watches
    finally:
        await watches.close()


async def test_a_stamped_pod_and_its_node_are_watched_by_name_and_nothing_else(
    scene: Scene, controller_api: KubeApi
) -> None:
    scene.pod_on(scene.node)  # a bystander, never asked for
    changed: list[str] = []
    async with holder_watches(controller_api, changed) as watches:
        watches.want("blast", (scene.ns, scene.pod))
        await wait_until_async(
            lambda: watches.seen(scene.ns, scene.pod).node is not None, 30, "pod and node seen"
        )
        # Each watch opens just after its LIST answered (the view is filled by the LIST).
        await wait_until_async(lambda: scene.open_watches("nodes"), 30, "the node watch open")
        assert scene.open_watches("pods") == [(scene.ns, scene.pod)]
        assert scene.open_watches("nodes") == [("", scene.node)]
        assert set(scene.reads()) == {
            (f"/api/v1/namespaces/{scene.ns}/pods", f"metadata.name={scene.pod}", False),
            (f"/api/v1/namespaces/{scene.ns}/pods", f"metadata.name={scene.pod}", True),
            ("/api/v1/nodes", f"metadata.name={scene.node}", False),
            ("/api/v1/nodes", f"metadata.name={scene.node}", True),
        }
        assert watches.seen(scene.ns, scene.pod).uid == scene.uid
        assert "blast" in changed
    scene.assert_name_scoped()


async def test_a_change_to_the_pod_or_its_node_reaches_the_namespace_at_once(
    scene: Scene, controller_api: KubeApi
) -> None:
    cp, ns, pod = scene.cp, scene.ns, scene.pod
    changed: list[str] = []
    async with holder_watches(controller_api, changed) as watches:
        watches.want("blast", (ns, pod))
        await wait_until_async(lambda: watches.seen(ns, pod).node is not None, 30, "synced")
        changed.clear()
        cp.admin.delete("pods", ns, pod, grace_seconds=30)
        await wait_until_async(
            lambda: (seen := watches.seen(ns, pod).pod) is not None and seen.deleting_at,
            30,
            "the pod seen Terminating",
        )
        assert changed and set(changed) == {"blast"}  # and the namespace told of it
        changed.clear()
        await asyncio.to_thread(node_not_ready, cp, scene.node)
        await wait_until_async(
            lambda: (node := watches.seen(ns, pod).node) is not None and node.ready == "False",
            30,
            "the node seen not Ready",
        )
        assert changed and set(changed) == {"blast"}
        cp.admin.delete("pods", ns, pod, grace_seconds=0)
        await wait_until_async(lambda: watches.seen(ns, pod).state == "absent", 30, "deleted")
    # All of it through the watches: each object was listed once.
    lists = sorted(path for path, _selector, watch in scene.reads() if not watch)
    assert lists == [f"/api/v1/namespaces/{ns}/pods", "/api/v1/nodes"]


async def test_watches_follow_the_stamps_and_stop_when_no_stamp_names_them(
    scene: Scene, controller_api: KubeApi
) -> None:
    ns, pod, node = scene.ns, scene.pod, scene.node
    with own_node(scene.cp) as other_node:
        worker = scene.pod_on(other_node)
        async with holder_watches(controller_api, []) as watches:
            watches.want("blast", (ns, pod))
            watches.want("blast-b", (ns, pod))  # two Leases, one pod: one watch
            await wait_until_async(
                lambda: scene.open_watches("nodes") == [("", node)], 30, "watching"
            )
            assert scene.open_watches("pods") == [(ns, pod)]
            watches.want("blast", (ns, worker))  # a new holder in one namespace
            await wait_until_async(
                lambda: len(scene.open_watches("pods")) == 2, 30, "both pods watched"
            )
            watches.want("blast-b", None)  # released
            await wait_until_async(
                lambda: (
                    scene.open_watches("pods") == [(ns, worker)]
                    and scene.open_watches("nodes") == [("", other_node)]
                ),
                30,
                "only the live stamp's pod and node watched",
            )
            assert watches.watched() == ([(ns, worker)], [other_node])
            watches.want("blast", None)
            await wait_until_async(
                lambda: not scene.open_watches("pods") and not scene.open_watches("nodes"),
                30,
                "nothing watched once no Lease is held",
            )
    scene.assert_name_scoped()


async def test_a_pod_not_listed_yet_is_unknown_never_gone(
    scene: Scene, controller_api: KubeApi
) -> None:
    async with holder_watches(controller_api, []) as watches:
        assert watches.seen(scene.ns, "no-such-pod").state == "unknown"  # not even wanted
        watches.want("blast", (scene.ns, "no-such-pod"))
        assert watches.seen(scene.ns, "no-such-pod").state == "unknown"  # LIST not back yet
        await wait_until_async(
            lambda: watches.seen(scene.ns, "no-such-pod").state == "absent", 30, "listed: absent"
        )


@contextlib.asynccontextmanager
async def reconciling(
    scene: Scene, api: KubeApi
) -> AsyncIterator[tuple[HolderWatches, ControllerMetrics, JsonObj]]:
    """A leader's reconciler over ``api`` whose namespace holds a Lease (created for real)
    stamped with the holder pod, renewed 2 s ago. A one-hour resync: whatever happens
    within a test happened because of watch events."""
    settings = Settings.of(namespaces=(scene.ns,), resync_seconds=3600)
    metrics = ControllerMetrics()
    cache = Cache([scene.ns])
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
    renewed = format_microtime(datetime.now(UTC) - timedelta(seconds=2))
    body = lease_doc(
        pod=f"{scene.ns}/{scene.pod}/{scene.uid}", renew_time=renewed, namespace=scene.ns
    )
    del body["metadata"]["resourceVersion"]
    lease = scene.cp.admin.create(body)
    task = asyncio.create_task(reconciler.run())
    try:
        for kind in (Kind.JOBS, Kind.CONFIGMAPS, Kind.ADMISSIONS):
            cache.replace(kind, scene.ns, [])
        cache.replace(Kind.LEASES, scene.ns, [lease])
        await wait_until_async(
            lambda: watches.seen(scene.ns, scene.pod).state != "unknown", 30, "holder watched"
        )
        yield watches, metrics, lease
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watches.close()


def reclaimed(scene: Scene, lease: JsonObj) -> Any:
    """The one PATCH that released the Lease: a CAS on the version the controller judged."""
    (patch,) = scene.lease_patches()
    assert patch["spec"] == {"holderIdentity": None}
    assert patch["metadata"]["resourceVersion"] == lease["metadata"]["resourceVersion"]
    return patch


async def test_a_terminating_holder_is_reclaimed_on_the_watch_event_not_the_resync(
    scene: Scene, controller_api: KubeApi
) -> None:
    async with reconciling(scene, controller_api) as (watches, metrics, lease):
        await wait_until_async(
            lambda: watches.seen(scene.ns, scene.pod).node is not None, 30, "node watched"
        )
        await asyncio.sleep(0.3)
        assert not scene.lease_patches()  # alive: left alone
        scene.cp.admin.delete("pods", scene.ns, scene.pod, grace_seconds=30)
        await wait_until_async(scene.lease_patches, 60, "the Lease released")
        reclaimed(scene, lease)
        pod_lists = [r for r in scene.reads() if r[0].endswith("/pods") and not r[2]]
        assert len(pod_lists) == 1  # no relist, no poll
        sample = metrics.registry.get_sample_value(
            "elb_gate_reclaim_after_evidence_seconds_count", {"evidence": "pod_terminating"}
        )
        assert sample == 1


async def test_a_deleted_holder_is_confirmed_with_a_fresh_get_then_reclaimed(
    scene: Scene, controller_api: KubeApi
) -> None:
    async with reconciling(scene, controller_api) as (_watches, _metrics, lease):
        scene.cp.admin.delete("pods", scene.ns, scene.pod, grace_seconds=0)
        await wait_until_async(scene.lease_patches, 60, "the Lease released")
        reclaimed(scene, lease)
        assert scene.gets(scene.pod)  # the 404 confirmed what the watch said


async def test_a_watch_that_says_gone_while_a_get_finds_the_holder_reclaims_nothing(
    scene: Scene, controller_api: KubeApi
) -> None:
    # The pod's watch opens with a DELETED the store does not reflect (a stale or
    # reordered stream): the GET before acting finds the holder's pod, same uid, alive.
    pod = scene.cp.admin.get("pods", scene.ns, scene.pod)
    scene.proxy.add(
        resource="pods", namespace=scene.ns, watch=True, event={"type": "DELETED", "object": pod}
    )
    async with reconciling(scene, controller_api):
        await wait_until_async(lambda: scene.gets(scene.pod), 30, "confirmed")
        await asyncio.sleep(0.5)
        assert not scene.lease_patches()


async def test_a_failed_confirmation_is_retried_within_seconds_not_at_the_resync(
    scene: Scene, controller_api: KubeApi
) -> None:
    async with reconciling(scene, controller_api) as (_watches, _metrics, lease):
        # The API answers 503 to the first two confirming GETs.
        scene.proxy.add(
            method="GET", resource="pods", namespace=scene.ns, name=scene.pod, status=503, count=2
        )
        scene.cp.admin.delete("pods", scene.ns, scene.pod, grace_seconds=0)
        await wait_until_async(scene.lease_patches, 60, "the Lease released")
        reclaimed(scene, lease)
        assert len(scene.gets(scene.pod)) >= 3  # two failed, one 404
