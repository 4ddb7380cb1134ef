"""At tens of thousands of Jobs the controller reads only what it needs: the live Jobs
(``status.successful=0``, as the webhook's census LIST reads them) and, for a live
finalizer that nothing in view vouches for — a search admitted before the install, with
no admission record and no record on the finalizer — one metadata-only lookup of its
batch work. Its finishing-or-orphan judgement is the one it made on the whole history.

Real API server, through the fault proxy (which sees every request); an in-process
controller with the controller's ServiceAccount and the shipped RBAC."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from controller.history import batch_work_selector, look_up
from controller.server import LIVE_JOBS, liveness_only_apps
from elbgate.kube.api import JOBS, METADATA_LIST, KubeApi, path
from elbgate.names import BATCH_WORK_SEEN_ANNOTATION, ORPHANED_SINCE_ANNOTATION
from testbed import elastic_blast as elb
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.waiting import wait_until, wait_until_async
from testbed.webhook_process import WebhookProcess
from tests.controller.conftest import controller_settings, running
from tests.controller.observed import job_annotations

KEEP = 3600
"""A batch TTL that outlives the test: the succeeded batch Job stays in the history."""


@pytest.fixture
def ns(control_plane: ControlPlane, hook: WebhookProcess) -> str:
    """A namespace elb-gate may read, not labelled gated: what is created in it before
    the test labels nothing was admitted by the webhook (no admission record)."""
    return hook.install.gate(control_plane.new_namespace("history"), label=False)


def succeeded(cp: ControlPlane, ns: str, name: str) -> bool:
    return int((cp.admin.get("jobs", ns, name).get("status") or {}).get("succeeded") or 0) > 0


def job_lists(proxy: FaultProxy, ns: str) -> list[dict[str, list[str]]]:
    return [
        parse_qs(urlsplit(pq).query)
        for method, pq in proxy.requests
        if method == "GET" and urlsplit(pq).path == path(JOBS, ns)
    ]


async def test_a_lookup_reads_one_jobs_metadata_and_nothing_else(
    control_plane: ControlPlane, ns: str, controller_api: KubeApi
) -> None:
    cp, job_id = control_plane, elb.search_id()
    for n in range(3):
        cp.admin.create(elb.ready(elb.blast_batch(job_id, n, ttl=KEEP), ns, run_seconds=600))
    body = await controller_api.request(
        "GET",
        path(JOBS, ns),
        query={"limit": "1", "labelSelector": batch_work_selector(job_id)},
        accept=METADATA_LIST,
    )
    assert body["kind"] == "PartialObjectMetadataList"
    (item,) = body["items"]
    assert set(item) == {"kind", "apiVersion", "metadata"}
    assert item["metadata"]["labels"]["elb-job-id"] == job_id
    seen = await look_up(controller_api, ns, job_id, 10)
    assert seen.startswith("blast/blastn-batch-") and seen.endswith(job_id[-8:])
    assert await look_up(controller_api, ns, elb.search_id(), 10) == ""


async def test_a_search_from_before_the_install_is_finishing_read_from_the_live_jobs_alone(
    control_plane: ControlPlane, ns: str, fault_proxy: FaultProxy, controller_api: KubeApi
) -> None:
    """Its batch Job succeeded and is kept; its finalizer runs past the grace; nothing
    recorded either. The controller lists no succeeded Job, looks the search up once,
    records the batch work on the finalizer and never flags it; a lone finalizer next to
    it, whose batch work never existed, is flagged as the orphan it is."""
    cp = control_plane
    job_id, lone_id = elb.search_id(), elb.search_id()
    (batch,) = [cp.admin.create(elb.ready(elb.blast_batch(job_id, 0, ttl=KEEP), ns, run_seconds=1))]
    fin = cp.admin.create(elb.ready(elb.finalizer(job_id), ns, run_seconds=600))
    lone = cp.admin.create(elb.ready(elb.finalizer(lone_id), ns, run_seconds=600))
    wait_until(lambda: succeeded(cp, ns, batch["metadata"]["name"]), 60, "the batch Job done")
    name, lone_name = fin["metadata"]["name"], lone["metadata"]["name"]
    fault_proxy.requests.clear()
    async with running(controller_api, controller_settings(ns)) as ctl:
        await wait_until_async(
            lambda: ORPHANED_SINCE_ANNOTATION in job_annotations(cp, ns, lone_name),
            30,
            "the lone finalizer flagged",
        )
        await wait_until_async(
            lambda: BATCH_WORK_SEEN_ANNOTATION in job_annotations(cp, ns, name),
            30,
            "the batch work recorded on the finalizer",
        )
        assert ctl.cache.synced(ns)
    found = job_annotations(cp, ns, name)
    assert found[BATCH_WORK_SEEN_ANNOTATION].endswith(f" blast/{batch['metadata']['name']}")
    assert ORPHANED_SINCE_ANNOTATION not in found
    # The liveness-only apps' Jobs (the dashboard's, a few, with short TTLs) are watched
    # whole; every read of the search apps is live only or a lookup.
    others = f"app in ({','.join(liveness_only_apps(ctl.settings.controller))})"
    reads = [q for q in job_lists(fault_proxy, ns) if q.get("labelSelector") != [others]]
    lists = [q for q in reads if "watch" not in q]
    watches = [q for q in reads if "watch" in q]
    live = [q for q in lists if q.get("fieldSelector") == [LIVE_JOBS]]
    lookups = [q for q in lists if q not in live]
    assert live and all(q.get("fieldSelector") == [LIVE_JOBS] for q in watches)
    # One lookup per search nothing vouched for (two here), each of one object at most.
    assert sorted(q["labelSelector"][0] for q in lookups) == sorted(
        batch_work_selector(i) for i in (job_id, lone_id)
    )
    assert all(q["limit"] == ["1"] for q in lookups)
