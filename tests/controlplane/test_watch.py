"""The test bed's LIST + WATCH (:mod:`testbed.watch`) on the real API server, through the
fault proxy: the first LIST, the events after it, a resume when the server ends the
stream (no LIST again, nothing handed over twice), and a 410 Gone: a *history*
consumer (``on_gap``) is told of the lost continuity and handed a fresh LIST; a
*picture* consumer is handed only what changed while nobody watched.

The 410 answers the resume; the LIST after it is refused (500) until the test has
changed the Leases, so those changes are seen by that LIST and by no watch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from testbed.api import Api, ApiError, JsonObj
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.waiting import wait_until
from testbed.watch import Watch

LEASES = "/apis/coordination.k8s.io/v1"


@pytest.fixture
def api(control_plane: ControlPlane, proxy: FaultProxy) -> Iterator[Api]:
    try:
        yield Api(proxy.url, proxy.ca_file, control_plane.token("admin"))
    finally:
        proxy.clear()


def lease(ns: str, name: str, watched: bool = True) -> dict[str, Any]:
    labels = {"watched": "yes"} if watched else {}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {},
    }


class Seen:
    """What a consumer was handed, in order: ``(type, name)`` of ``ns``'s Leases, and
    ``("gap", "")`` for each gap (why: in :attr:`gaps`)."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        self.log: list[tuple[str, str]] = []
        self.gaps: list[str] = []

    def on_event(self, kind: str, obj: JsonObj) -> None:
        if obj["metadata"]["namespace"] == self.ns:
            self.log.append((kind, obj["metadata"]["name"]))

    def on_gap(self, why: str) -> None:
        self.log.append(("gap", ""))
        self.gaps.append(why)

    def reaches(self, expected: list[tuple[str, str]], what: str) -> None:
        wait_until(lambda: len(self.log) >= len(expected), 60, what)
        assert self.log == expected


def requests(proxy: FaultProxy, path: str) -> tuple[int, int]:
    """LISTs and WATCHes of ``path`` the proxy received."""
    lists = watches = 0
    for method, target in list(proxy.requests):
        url = urlsplit(target)
        if method == "GET" and url.path == path:
            if parse_qs(url.query).get("watch"):
                watches += 1
            else:
                lists += 1
    return lists, watches


def resumed(proxy: FaultProxy, path: str) -> None:
    """Wait until the server has ended two streams, and check that each was resumed."""
    lists, watches = requests(proxy, path)
    wait_until(lambda: requests(proxy, path)[1] >= watches + 2, 60, "two resumed watches")
    assert requests(proxy, path)[0] == lists, "a stream the server ended is resumed, not relisted"


def gone_then_list_refused(proxy: FaultProxy, gone: dict[str, Any]) -> Any:
    """The next resume is answered 410; the LIST after it fails until the caller ends
    the returned fault (``fault.count = fault.fired``)."""
    refused = proxy.add(method="GET", resource="leases", watch=False, status=500, count=None)
    proxy.add(method="GET", resource="leases", watch=True, **gone)
    wait_until(lambda: refused.fired, 60, "the LIST after the 410")
    return refused


@pytest.mark.parametrize(
    "gone", [{"watch_gone": True}, {"status": 410}], ids=["error-event", "status"]
)
def test_a_history_consumer_is_told_of_a_410_and_handed_a_fresh_list(
    control_plane: ControlPlane, proxy: FaultProxy, api: Api, gone: dict[str, Any]
) -> None:
    admin, ns = control_plane.admin, control_plane.new_namespace("watch-history")
    admin.create(lease(ns, "a"))
    seen = Seen(ns)
    # Cluster-wide, as the reliability observers watch.
    watch = Watch(api, "leases", seen.on_event, seen.on_gap, stream_seconds=1).start()
    try:
        assert seen.log == [("LISTED", "a")]  # state found, not a write seen
        admin.create(lease(ns, "b"))
        seen.reaches([("LISTED", "a"), ("ADDED", "b")], "the create")
        resumed(proxy, f"{LEASES}/leases")
        admin.patch("leases", ns, "b", {"spec": {"holderIdentity": "h"}})
        seen.reaches([("LISTED", "a"), ("ADDED", "b"), ("MODIFIED", "b")], "the patch")

        refused = gone_then_list_refused(proxy, gone)
        admin.delete("leases", ns, "a")  # while no watch runs: never seen as DELETED
        admin.create(lease(ns, "c"))
        refused.count = refused.fired
        before = [("LISTED", "a"), ("ADDED", "b"), ("MODIFIED", "b")]
        after = [("gap", ""), ("LISTED", "b"), ("LISTED", "c")]
        seen.reaches(before + after, "the gap and the fresh LIST")
        assert len(seen.gaps) == watch.gaps == 1
        assert seen.gaps[0].startswith("leases watch: 410 Gone")
        admin.create(lease(ns, "d"))
        seen.reaches(before + after + [("ADDED", "d")], "events after the fresh LIST")
    finally:
        watch.stop()
    assert all(isinstance(e, ApiError) and e.status == 500 for e in watch.errors)


def test_a_picture_consumer_is_handed_only_what_changed_during_a_410(
    control_plane: ControlPlane, proxy: FaultProxy, api: Api
) -> None:
    admin, ns = control_plane.admin, control_plane.new_namespace("watch-picture")
    for name in ("a", "b"):
        admin.create(lease(ns, name))
    admin.create(lease(ns, "x", watched=False))
    seen = Seen(ns)
    watch = Watch(
        api, "leases", seen.on_event, namespace=ns, label_selector="watched=yes", stream_seconds=1
    ).start()
    try:
        assert seen.log == [("ADDED", "a"), ("ADDED", "b")]  # x is not selected
        admin.create(lease(ns, "c"))
        seen.reaches([("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")], "the create")
        resumed(proxy, f"{LEASES}/namespaces/{ns}/leases")
        admin.create(lease(ns, "d"))
        before = [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("ADDED", "d")]
        seen.reaches(before, "the create after the resumes")

        refused = gone_then_list_refused(proxy, {"watch_gone": True})
        admin.delete("leases", ns, "a")
        admin.patch("leases", ns, "c", {"spec": {"holderIdentity": "h"}})
        admin.patch("leases", ns, "d", {"metadata": {"labels": {"watched": "no"}}})
        admin.create(lease(ns, "e"))
        refused.count = refused.fired
        # b did not change: it is not handed over again; d left the selection.
        after = [("DELETED", "a"), ("DELETED", "d"), ("MODIFIED", "c"), ("ADDED", "e")]
        seen.reaches(before + after, "the difference the LIST after the 410 found")
        assert watch.gaps == 1
        admin.create(lease(ns, "f"))
        seen.reaches(before + after + [("ADDED", "f")], "events after the relist")
    finally:
        watch.stop()
    assert all(isinstance(e, ApiError) and e.status == 500 for e in watch.errors)


def test_a_refused_watch_raises_the_servers_status_as_a_refused_request_does(
    control_plane: ControlPlane,
) -> None:
    ns = control_plane.new_namespace("watch-refused")
    bob = control_plane.api("bob")  # no RoleBinding in a namespace that is not gated
    path = bob.resource("leases").path(ns)
    with pytest.raises(ApiError) as refused:
        next(bob.stream(path, {}))
    assert (refused.value.status, refused.value.reason) == (403, "Forbidden")
    assert refused.value.body["kind"] == "Status"
    assert 'User "bob" cannot watch resource "leases"' in refused.value.message
