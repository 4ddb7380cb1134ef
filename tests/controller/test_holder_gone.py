"""The holder-gone rule, one row per case of docs/holder-gone.md.

The Lease was last renewed at 11:59:40.25 (``RENEWED``); now is 12:00:00 (``NOW``).
Container and node times have whole-second resolution, as the API writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from controller.holders import (
    ContainerView,
    Judgement,
    NodeView,
    PodSeen,
    PodView,
    judge_holder,
)
from tests.builders import (
    NODE,
    NOW,
    POD_UID,
    RENEWED,
    node_doc,
    pod_doc,
    running,
    terminated,
    waiting,
)

STAMP = ("blast", "celery-worker-0", POD_UID)
BOUND = 10  # the default ELB_GATE_HOLDER_NODE_NOT_READY_SECONDS


def after(seconds: float) -> datetime:
    """``seconds`` after the last renewal."""
    return RENEWED + timedelta(seconds=seconds)


def before(seconds: float) -> datetime:
    return RENEWED - timedelta(seconds=seconds)


def seen(pod: dict[str, Any], node: dict[str, Any] | None = None) -> PodSeen:
    return PodSeen.of(PodView.from_dict(pod), NodeView.from_dict(node) if node else None)


@dataclass(frozen=True)
class Case:
    name: str
    seen: PodSeen
    gone: str | None
    """The expected evidence reason, or ``None`` for "not gone"."""


SIDECAR = "linkerd-proxy"

CASES = [
    # --- the pod itself ---------------------------------------------------------------
    Case("a running pod whose container runs since before the renewal", seen(pod_doc()), None),
    Case("the pod no longer exists", PodSeen("absent"), "pod_deleted"),
    Case(
        "a pod of that name exists with another uid",
        PodSeen("present", uid="7d0e9a2c-new"),
        "pod_replaced",
    ),
    Case("the pod cannot be seen", PodSeen("unknown", detail="403 Forbidden"), None),
    Case(
        "the pod is Terminating (deletionTimestamp set), its container still running",
        seen(pod_doc(deleting=NOW + timedelta(seconds=25))),
        "pod_terminating",
    ),
    Case(
        "the pod Failed",
        seen(pod_doc([terminated(ended=after(3))], phase="Failed")),
        "pod_finished",
    ),
    Case(
        "the pod Succeeded",
        seen(pod_doc([terminated(ended=after(3), code=0)], phase="Succeeded")),
        "pod_finished",
    ),
    # --- its container(s) -------------------------------------------------------------
    Case(
        "the container restarted after the renewal",
        seen(pod_doc([running(since=after(6), restarts=1, last_ended=after(5))])),
        "container_restarted",
    ),
    Case(
        "the container restarted long before the renewal",
        seen(pod_doc([running(since=before(600), restarts=3, last_ended=before(601))])),
        None,
    ),
    Case(
        "the container crashed after the renewal and waits in CrashLoopBackOff",
        seen(pod_doc([waiting(restarts=2, last_ended=after(2))])),
        "containers_stopped",
    ),
    Case(
        "the container ended after the renewal and is not restarted (restartPolicy Never)",
        seen(pod_doc([terminated(ended=after(4))])),
        "containers_stopped",
    ),
    Case(
        "the container ended in the renewal's own second (it was the renewer: gone)",
        seen(pod_doc([terminated(ended=RENEWED.replace(microsecond=0))])),
        "containers_stopped",
    ),
    Case(
        "a container that ended in an earlier second never held it: nothing to judge",
        seen(pod_doc([waiting(restarts=1, last_ended=before(2))])),
        None,
    ),
    Case(
        "a restart inside the renewal's second is invisible at second resolution (TTL)",
        seen(
            pod_doc(
                [
                    running(
                        since=RENEWED.replace(microsecond=0),
                        restarts=1,
                        last_ended=RENEWED.replace(microsecond=0),
                    )
                ]
            )
        ),
        None,
    ),
    Case(
        "a container whose first start came after the renewal never held it",
        seen(pod_doc([running(since=after(5), restarts=0)])),
        None,
    ),
    Case(
        "a container down at the renewal and started since never held it",
        seen(pod_doc([running(since=after(5), restarts=4, last_ended=before(30))])),
        None,
    ),
    Case(
        "two containers, only the sidecar restarted: the holder may live",
        seen(
            pod_doc([running(), running(SIDECAR, since=after(6), restarts=1, last_ended=after(5))])
        ),
        None,
    ),
    Case(
        "two containers, the worker restarted, no annotation: ambiguous, not gone",
        seen(pod_doc([running(since=after(6), restarts=1, last_ended=after(5)), running(SIDECAR)])),
        None,
    ),
    Case(
        "two containers, the annotated holder container restarted",
        seen(
            pod_doc(
                [running(since=after(6), restarts=1, last_ended=after(5)), running(SIDECAR)],
                holder_container="elb-openapi",
            )
        ),
        "container_restarted",
    ),
    Case(
        "two containers, the annotated holder runs on while the sidecar restarted",
        seen(
            pod_doc(
                [running(), running(SIDECAR, since=after(6), restarts=1, last_ended=after(5))],
                holder_container="elb-openapi",
            )
        ),
        None,
    ),
    Case(
        "an annotation naming no container of the pod falls back to all of them",
        seen(
            pod_doc(
                [running(since=after(6), restarts=1, last_ended=after(5)), running(SIDECAR)],
                holder_container="worker",
            )
        ),
        None,
    ),
    Case(
        "both containers restarted after the renewal",
        seen(
            pod_doc(
                [
                    running(since=after(6), restarts=1, last_ended=after(5)),
                    running(SIDECAR, since=after(7), restarts=1, last_ended=after(5)),
                ]
            )
        ),
        "container_restarted",
    ),
    Case(
        "a completed init container never held it; the main container restarted",
        seen(
            pod_doc(
                [running(since=after(6), restarts=1, last_ended=after(5))],
                init=[terminated("wait-for-db", ended=before(7200), code=0)],
            )
        ),
        "container_restarted",
    ),
    Case(
        "a running native sidecar (restartable init container) may hold it",
        seen(
            pod_doc(
                [waiting(restarts=1, last_ended=after(2))],
                init=[running("istio-proxy", since=before(7200))],
            )
        ),
        None,
    ),
    Case(
        "a native sidecar runs on, but the annotated main container crashed",
        seen(
            pod_doc(
                [waiting(restarts=1, last_ended=after(2))],
                init=[running("istio-proxy", since=before(7200))],
                holder_container="elb-openapi",
            )
        ),
        "containers_stopped",
    ),
    # --- its node ------------------------------------------------------------------------
    Case("the node is Ready", seen(pod_doc(), node_doc()), None),
    Case(
        "the node is NotReady since before the renewal, and the bound has passed since it",
        seen(pod_doc(), node_doc(ready="Unknown", since=before(600))),
        "node_not_ready",
    ),
    Case(
        "the node went NotReady after the renewal, the bound has passed",
        seen(pod_doc(), node_doc(ready="Unknown", since=NOW - timedelta(seconds=BOUND))),
        "node_not_ready",
    ),
    Case(
        "the node went NotReady within the bound",
        seen(pod_doc(), node_doc(ready="False", since=NOW - timedelta(seconds=BOUND - 1))),
        None,
    ),
    Case(
        "an unscheduled pod has no node to judge",
        seen(pod_doc(node=None), None),
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_holder_gone_table(case: Case) -> None:
    got = judge_holder(STAMP, case.seen, RENEWED, NOW, BOUND)
    assert (got.gone.reason if got.gone else None) == case.gone
    if got.gone is not None:
        assert "celery-worker-0" in got.gone.detail


def test_a_node_within_its_bound_says_when_to_look_again() -> None:
    since = NOW - timedelta(seconds=4)
    got = judge_holder(
        STAMP, seen(pod_doc(), node_doc(ready="Unknown", since=since)), RENEWED, NOW, BOUND
    )
    assert got == Judgement(look_again_at=since + timedelta(seconds=BOUND))


def test_a_renewal_made_while_the_node_was_not_ready_restarts_the_bound() -> None:
    # The kubelet died, the holder's process did not: it renewed 5 s ago, after the node
    # went NotReady 600 s ago. The bound counts from that sign of life.
    renewed = NOW - timedelta(seconds=5)
    got = judge_holder(
        STAMP,
        seen(pod_doc(), node_doc(ready="Unknown", since=NOW - timedelta(seconds=600))),
        renewed,
        NOW,
        BOUND,
    )
    assert got.gone is None and got.look_again_at == renewed + timedelta(seconds=BOUND)


def test_the_evidence_says_since_when_it_holds() -> None:
    def since(pod_seen: PodSeen) -> datetime | None:
        got = judge_holder(STAMP, pod_seen, RENEWED, NOW, BOUND)
        assert got.gone is not None
        return got.gone.since

    # Terminating: the delete was asked deletionGracePeriodSeconds before deletionTimestamp.
    deleting = NOW + timedelta(seconds=25)
    assert since(seen(pod_doc(deleting=deleting, grace=30))) == deleting - timedelta(seconds=30)
    # A restart: from the moment the old instance ended.
    crash = after(5).replace(microsecond=0)
    restarted = pod_doc([running(since=after(6), restarts=1, last_ended=crash)])
    assert since(seen(restarted)) == crash
    # A NotReady node: from the moment the bound was reached.
    went = NOW - timedelta(seconds=12)
    assert since(seen(pod_doc(), node_doc(ready="Unknown", since=went))) == went + timedelta(
        seconds=BOUND
    )


def test_the_pod_view_reads_what_the_kubelet_writes() -> None:
    doc = pod_doc(
        [waiting(restarts=2, last_ended=after(2)), running(SIDECAR)],
        init=[terminated("wait-for-db", ended=before(7200), code=0)],
        deleting=NOW,
        holder_container="elb-openapi",
    )
    view = PodView.from_dict(doc)
    assert (view.namespace, view.name, view.uid, view.phase) == (
        "blast",
        "celery-worker-0",
        POD_UID,
        "Running",
    )
    assert view.node_name == NODE and view.holder_container == "elb-openapi"
    assert view.deleting_at == NOW and view.deletion_grace_seconds == 30
    init, main, sidecar = view.containers
    assert init == ContainerView(
        "wait-for-db", True, 0, False, None, before(7200).replace(microsecond=0)
    )
    assert (main.running, main.restart_count, main.ended) == (
        False,
        2,
        after(2).replace(microsecond=0),
    )
    assert sidecar.running and sidecar.started == before(7200).replace(microsecond=0)


def test_the_node_view_reads_the_ready_condition() -> None:
    went = NOW - timedelta(seconds=40)
    assert NodeView.from_dict(node_doc(ready="Unknown", since=went)) == NodeView(
        NODE, "Unknown", went
    )
    bare = {"metadata": {"name": "n"}, "status": {}}
    assert NodeView.from_dict(bare) == NodeView("n", "", None)


def test_a_not_ready_node_writes_its_bound_as_kubernetes_writes_durations() -> None:
    node = node_doc(ready="Unknown", since=before(600))
    got = judge_holder(STAMP, seen(pod_doc(), node), NOW - timedelta(seconds=200), NOW, 90)
    assert got.gone is not None
    assert "has not been renewed for 1m30s since then or since its last renewal" in got.gone.detail
