"""Gate B's census read from the webhook's own Job watch, at a fence
(``ELB_GATE_CENSUS_READ=watch``, the default; docs/design.md, "The census read at a
fence").

The webhook reaches the API server through the fault proxy, which can hold its Job
watch's events back (a watch cache behind the API server). A census read from that
watch alone would decide on a namespace as it was a moment ago; at the fence it must
decide on the namespace as it is, and it must do so from the watch (not by falling back
to the LIST), or the API server's scan per admission is back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from elbgate.names import ADMISSION_RECORD_CONFIGMAP, ADMISSION_RECORD_KEY
from testbed import elastic_blast as elb
from testbed.clients import OpenApiLeaseClient
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess

pytestmark = [pytest.mark.kubectl, pytest.mark.usefixtures("no_faults_left")]

LAG_SECONDS = 3.0
"""How late the proxy passes on the webhook's Job watch events."""
API_TIMEOUT_SECONDS = 10.0
"""The webhook's deadline per API call, which also bounds its wait for the fence's
event: far above ``LAG_SECONDS``, so that a busy machine does not turn a read from the
watch into a fall-back LIST."""
HOLDER = "openapi-dispatcher-census-watch"


@pytest.fixture(scope="module")
def webhook_env() -> dict[str, str]:
    return {"ELB_GATE_API_TIMEOUT_SECONDS": str(API_TIMEOUT_SECONDS)}


@pytest.fixture(scope="module")
def hook(proxied_hook: WebhookProcess) -> WebhookProcess:
    return proxied_hook


def census_reads(hook: WebhookProcess, source: str, reason: str) -> int:
    return hook.census_reads()[f"{source} ({reason})"]


def first_job(namespace: str) -> dict[str, Any]:
    """A new search's first Job (cloud job submission: ``submit-jobs-<id8>``)."""
    return elb.for_api(elb.submit_jobs(elb.search_id()), namespace)


def create(cp: ControlPlane, user: str, obj: dict[str, Any]) -> Any:
    return cp.kubectl(user, "create", "-f", "-", input=json.dumps(obj))


def reserved(cp: ControlPlane, namespace: str) -> str:
    """The admission record's reserved Jobs, as stored (``""`` without a record)."""
    record = cp.admin.find("configmaps", namespace, ADMISSION_RECORD_CONFIGMAP)
    return str(((record or {}).get("data") or {}).get(ADMISSION_RECORD_KEY) or "")


def seeded(cp: ControlPlane, hook: WebhookProcess, running: int) -> tuple[str, list[str]]:
    """A gated namespace with ``running`` searches (their blast Jobs created before it was
    gated), alice holding its Lease, and the webhook's census read from its watch."""
    namespace = cp.new_namespace("census-watch")
    names = [
        cp.admin.create(elb.ready(elb.blast_batch(elb.search_id(), 0), namespace))["metadata"][
            "name"
        ]
        for _ in range(running)
    ]
    hook.install.gate(namespace)
    assert OpenApiLeaseClient.on(cp, "alice", namespace, holder=HOLDER).acquire() == "acquired"

    def read_from_the_watch() -> bool:
        # bob does not hold the Lease: the census is read, then Gate A refuses; no write.
        before = census_reads(hook, "watch", "fenced")
        result = create(cp, "bob", first_job(namespace))
        assert result.returncode == 1 and "Gate A" in result.stderr, result.stderr
        return census_reads(hook, "watch", "fenced") > before

    # The namespace's first census read starts its watch (and LISTs); once the watch has
    # synced, reads come from it.
    wait_until(
        read_from_the_watch,
        120,
        "a census read from the webhook's Job watch",
        detail=lambda: "\n".join(
            [line for line in hook.metrics().splitlines() if "census_reads" in line]
            + hook.log().splitlines()[-5:]
        ),
    )
    return namespace, names


def lagging(proxy: FaultProxy, namespace: str) -> None:
    """From now on the webhook's Job watch of ``namespace`` passes events on late."""
    lag = proxy.add(resource="jobs", namespace=namespace, watch=True, lag=LAG_SECONDS, count=None)
    proxy.end_watches()  # the webhook resumes its watch, now through the lag
    wait_until(lambda: lag.fired >= 1, 60, "the webhook's Job watch resumed through the lag")


def test_a_search_that_ended_a_moment_ago_frees_its_slot_though_the_watch_lags(
    control_plane: ControlPlane, hook: WebhookProcess, proxy: FaultProxy
) -> None:
    namespace, names = seeded(control_plane, hook, 3)
    lagging(proxy, namespace)
    fenced = census_reads(hook, "watch", "fenced")
    fence = hook.census_fence()

    control_plane.admin.delete("jobs", namespace, names[0])  # one of the 3 searches ends
    result = create(control_plane, "alice", first_job(namespace))

    # The deletion reaches the watch seconds late; read at the fence, the census already
    # sees 2 of 3 searches and admits the new one, and it read them from the watch.
    assert result.returncode == 0, result.stderr
    assert census_reads(hook, "watch", "fenced") == fenced + 1
    # The fence's event came through the same lag: that read's wait, not its write, is
    # the one that took over 250 ms (the lag is seconds), and /metrics says which.
    grown = hook.census_fence() - fence
    assert grown["write"] == grown["wait"] == 1, grown
    assert grown["wait over 0.25 s"] == 1, grown


def test_a_search_opened_a_moment_ago_holds_its_slot_once_its_reservation_goes(
    control_plane: ControlPlane, hook: WebhookProcess, proxy: FaultProxy
) -> None:
    namespace, _ = seeded(control_plane, hook, 2)
    lagging(proxy, namespace)
    fenced = census_reads(hook, "watch", "fenced")

    opened = first_job(namespace)
    assert create(control_plane, "alice", opened).returncode == 0  # 3 of 3
    name = opened["metadata"]["name"]
    # The admitting replica drops the search's reservation once a GET shows its Job
    # stored, long before the lagging watch shows it: from then on only the census
    # counts it.
    wait_until(
        lambda: name not in reserved(control_plane, namespace),
        60,
        "the admitted Job's reservation dropped",
        interval=0.05,
    )
    result = create(control_plane, "alice", first_job(namespace))

    assert result.returncode == 1 and "Gate B: 3/3" in result.stderr, result.stderr
    assert census_reads(hook, "watch", "fenced") == fenced + 2


def test_a_fence_write_the_api_refuses_once_sends_that_read_alone_to_the_list(
    control_plane: ControlPlane, hook: WebhookProcess, proxy: FaultProxy
) -> None:
    namespace, _ = seeded(control_plane, hook, 3)
    refused = census_reads(hook, "list", "fence_refused")
    fenced = census_reads(hook, "watch", "fenced")
    fault = proxy.add(method="PATCH", resource="jobs", namespace=namespace, status=503, count=1)

    first = create(control_plane, "alice", first_job(namespace))
    second = create(control_plane, "alice", first_job(namespace))

    # Both refused by Gate B at 3 of 3, the first from the LIST, the next from the watch.
    assert fault.fired == 1
    for result in (first, second):
        assert result.returncode == 1 and "Gate B: 3/3" in result.stderr, result.stderr
    assert census_reads(hook, "list", "fence_refused") == refused + 1
    assert census_reads(hook, "watch", "fenced") == fenced + 1
