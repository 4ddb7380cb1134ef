"""The shared LIST + WATCH loop against the real API server: it mirrors what the
server holds, resumes a watch the server ends, and relists after a 410 Gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import pytest

from elbgate.kube.api import JOBS, KubeApi, path
from elbgate.kube.config import KubeConfig
from elbgate.kube.informer import Informer, WatchSpec
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.waiting import wait_until_async


class Mirror:
    """A sink that keeps the names it was told about and the order of calls."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.calls: list[str] = []

    def replace(self, kind: str, namespace: str, items: Iterable[Mapping[str, Any]]) -> None:
        self.names = {str(i["metadata"]["name"]) for i in items}
        self.calls.append("replace")

    def apply(self, kind: str, namespace: str, event_type: str, obj: Mapping[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        if event_type == "DELETED":
            self.names.discard(name)
        else:
            self.names.add(name)
        self.calls.append(event_type)

    def mark_unsynced(self, kind: str, namespace: str) -> None:
        self.calls.append("unsynced")


class Counts:
    """WatchMetrics that counts."""

    def __init__(self) -> None:
        self.api_errors = 0
        self.watch_restarts = 0

    def record_api_error(self, verb: str, resource: str) -> None:
        self.api_errors += 1

    def record_watch_restart(self, resource: str) -> None:
        self.watch_restarts += 1


def job(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "blast"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            },
        },
    }


@pytest.fixture
async def through_proxy(control_plane: ControlPlane, proxy: FaultProxy) -> AsyncIterator[KubeApi]:
    config = KubeConfig.from_kubeconfig(proxy.kubeconfig(control_plane.token("admin"), "informer"))
    try:
        async with KubeApi(config) as client:
            yield client
    finally:
        proxy.clear()


async def test_the_mirror_follows_the_server_and_relists_after_a_410(
    control_plane: ControlPlane, proxy: FaultProxy, through_proxy: KubeApi
) -> None:
    ns = control_plane.new_namespace("informer")
    control_plane.admin.create(job(ns, "before"))
    mirror, counts = Mirror(), Counts()
    # The server ends each watch after 1 s, so the loop resumes watches often.
    informer = Informer(
        through_proxy,
        mirror,
        WatchSpec("jobs", ns, path(JOBS, ns)),
        counts,
        watch_timeout_seconds=1,
    )
    task = asyncio.create_task(informer.run())
    try:
        await wait_until_async(lambda: mirror.names == {"before"}, 60, "the first LIST")
        control_plane.admin.create(job(ns, "during"))
        await wait_until_async(lambda: "during" in mirror.names, 60, "the ADDED event")
        watches = proxy.forwarded[("GET", "jobs")]
        await wait_until_async(
            lambda: proxy.forwarded[("GET", "jobs")] > watches + 1, 60, "the watch to be resumed"
        )
        assert mirror.calls.count("replace") == 1, (
            "a watch the server ended is resumed, not relisted"
        )

        # etcd compacted the history the next watch resumes from.
        proxy.add(resource="jobs", watch=True, watch_gone=True)
        control_plane.admin.delete("jobs", ns, "before")
        await wait_until_async(
            lambda: mirror.calls.count("replace") == 2, 60, "the relist after 410"
        )
        assert mirror.calls[mirror.calls.index("unsynced") + 1] == "replace"
        assert counts.watch_restarts == 1 and counts.api_errors == 0
        await wait_until_async(
            lambda: mirror.names == {"during"}, 60, "the mirror to show the delete"
        )
        control_plane.admin.create(job(ns, "after"))
        await wait_until_async(lambda: "after" in mirror.names, 60, "events after the relist")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
