"""Every LIST elb-gate sends is paged: a namespace holds tens of thousands of
finished Jobs (the dashboard measured 76,571, about 1 GB per unpaged LIST, and its
sidecar was OOM-killed by such LISTs until it paged them all).

``KubeApi`` refuses a GET of a collection that carries neither ``limit`` nor
``watch`` before anything is sent, so a new unpaged LIST fails every test that
reaches it; ``list_objects`` reads ``limit`` pages following ``continue``.
The requests are observed through the fault proxy in front of the real API server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import pytest

from elbgate.kube.api import (
    JOBS,
    LEASES,
    NODES,
    PODS,
    ApiUnavailable,
    KubeApi,
    is_collection,
    path,
)
from elbgate.kube.config import KubeConfig
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from tests.kube_access.test_api import suspended_job


@pytest.fixture(scope="module")
def ns(control_plane: ControlPlane) -> str:
    return control_plane.new_namespace("paged")


@pytest.fixture
async def api(control_plane: ControlPlane, proxy: FaultProxy) -> AsyncIterator[KubeApi]:
    config = KubeConfig.from_kubeconfig(proxy.kubeconfig(control_plane.token("admin"), "paged"))
    try:
        async with KubeApi(config) as client:
            yield client
    finally:
        proxy.clear()


@pytest.mark.parametrize(
    ("url", "collection"),
    [
        (path(JOBS, "blast"), True),
        (path(NODES), True),
        (path(PODS), True),
        ("/api/v1/namespaces", True),
        ("/api/v1/namespaces/blast", False),
        (path(JOBS, "blast", "elb-finalizer-1"), False),
        (path(LEASES, "blast", "elb-blast-submit-blast"), False),
        (path(PODS, "blast", "p", "status"), False),
        (path(NODES, name="aks-system-0"), False),
        ("/version", False),
        ("/apis", False),
    ],
)
def test_collections_are_told_from_objects(url: str, collection: bool) -> None:
    assert is_collection(url) is collection


def _lists(proxy: FaultProxy, url: str) -> list[dict[str, list[str]]]:
    return [
        parse_qs(urlsplit(pq).query)
        for method, pq in proxy.requests
        if method == "GET" and urlsplit(pq).path == url
    ]


async def test_a_list_is_read_in_pages_and_returned_whole(
    api: KubeApi, proxy: FaultProxy, ns: str
) -> None:
    names = [f"paged-{i:02d}" for i in range(12)]
    for name in names:
        await api.create(path(JOBS, ns), suspended_job(ns, name, "submit"))
    proxy.requests.clear()
    body = await api.list_objects(path(JOBS, ns), label_selector="app=submit", page_size=5)
    assert sorted(j["metadata"]["name"] for j in body["items"]) == names
    assert body["metadata"]["resourceVersion"] and "continue" not in body["metadata"]
    pages = _lists(proxy, path(JOBS, ns))
    assert [q["limit"] for q in pages] == [["5"], ["5"], ["5"]]
    assert ["continue" in q for q in pages] == [False, True, True]
    assert all(q["labelSelector"] == ["app=submit"] for q in pages)


async def test_an_unpaged_list_is_refused_before_anything_is_sent(
    api: KubeApi, proxy: FaultProxy, ns: str
) -> None:
    proxy.requests.clear()
    with pytest.raises(ValueError, match="unpaged LIST"):
        await api.get(path(JOBS, ns))
    with pytest.raises(ValueError, match="unpaged LIST"):
        await api.request("GET", path(NODES), query={"labelSelector": "agentpool=system"})
    assert _lists(proxy, path(JOBS, ns)) == [] and _lists(proxy, path(NODES)) == []
    # An object, and a watch, are not LISTs.
    assert await api.get_or_none(path(JOBS, ns, "no-such-job")) is None


async def test_one_deadline_bounds_every_page_of_a_list(
    api: KubeApi, proxy: FaultProxy, ns: str
) -> None:
    for i in range(4):
        await api.create(path(JOBS, ns), suspended_job(ns, f"slow-{i}", "blast"))
    # The first page takes part of the deadline; the second is held longer than the
    # whole LIST may take. The error names the deadline as configured (what an
    # operator can look up and raise), not the share left for the stalled page.
    proxy.add(method="GET", resource="jobs", namespace=ns, delay=0.4, count=1)
    proxy.add(method="GET", resource="jobs", namespace=ns, delay=30.0, count=1)
    url = path(JOBS, ns)
    with pytest.raises(ApiUnavailable) as err:
        await api.list_objects(url, label_selector="app=blast", page_size=2, deadline=3)
    assert str(err.value) == f"GET {url}: not read whole within 3s (2 objects read)"


async def test_a_list_with_no_first_answer_names_its_deadline_as_configured(
    api: KubeApi, proxy: FaultProxy, ns: str
) -> None:
    proxy.add(method="GET", resource="jobs", namespace=ns, delay=30.0, count=1)
    url = path(JOBS, ns)
    with pytest.raises(ApiUnavailable) as err:
        await api.list_objects(url, label_selector="app=blast", deadline=0.5)
    assert str(err.value) == f"GET {url}: no answer within 0.5s"
