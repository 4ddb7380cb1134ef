"""Every ElasticBLAST flow on the real control plane, applied by ``kubectl`` as the submitter.

Cold local SSD, cold persistent volume, partitioned, sharded, warm reuse, cloud
job submission and prepare only, each with the templates' Job shapes: admitted
whole below the ceiling (3), and refused at its first Job at the ceiling, with
nothing of the search left for ``kubectl get jobs`` to find.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import elastic_blast as elb
from testbed.audit_log import requests_to
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.graph.conftest import webhook
from tests.graph.submitter import nothing_left

S1 = elb.search_id(1)


@pytest.fixture(scope="module")
def hook(control_plane: ControlPlane, ordinal_nodes: list[str]) -> Iterator[WebhookProcess]:
    with webhook(control_plane) as process:
        yield process


def first_search_job(bodies: list[dict]) -> int:
    """Where the search itself starts: past the holder's setup Jobs without an id."""
    return next(i for i, b in enumerate(bodies) if "elb-job-id" in b["metadata"]["labels"])


@pytest.mark.parametrize("kind", elb.FLOWS)
def test_each_flow_is_admitted_whole_under_the_ceiling(
    control_plane: ControlPlane, hook: WebhookProcess, scene_for, kind: str
) -> None:
    scene = scene_for(hook)
    alice = scene.submitter().acquire()
    scene.busy(2, alice)
    bodies = [scene.ready(b) for b in elb.flow(kind, S1)]
    applied = alice.submit(bodies)
    assert [a.ok for a in applied] == [True] * len(bodies), [a.stderr for a in applied]
    assert all(a.stdout == f"job.batch/{a.job} created\n" for a in applied)
    stored = {j["metadata"]["name"] for j in control_plane.admin.list("jobs", scene.namespace)}
    assert {b["metadata"]["name"] for b in bodies} <= stored


@pytest.mark.parametrize("kind", elb.FLOWS)
def test_each_flow_is_refused_at_its_first_job_at_the_ceiling_leaving_nothing(
    control_plane: ControlPlane, hook: WebhookProcess, scene_for, kind: str
) -> None:
    scene = scene_for(hook)
    alice = scene.submitter().acquire()
    busy = scene.busy(3, alice)
    bodies = [scene.ready(b) for b in elb.flow(kind, S1)]
    applied = alice.submit(bodies)
    first = first_search_job(bodies)
    assert [a.ok for a in applied] == [True] * first + [False]  # stopped at the search's first Job
    refused = applied[-1]
    assert refused.job == bodies[first]["metadata"]["name"]
    ref = f"Job {scene.namespace}/{refused.job} (app={bodies[first]['metadata']['labels']['app']}, elb-job-id={S1})"
    ids = ", ".join(sorted(busy))
    assert refused.stderr == (
        f'Error from server (TooManyRequests): error when creating "{refused.path}": admission '
        'webhook "search-admission.elb-gate.io" denied the request: Gate B: 3/3 searches already '
        f"active in namespace {scene.namespace} ({ids}), so {ref} cannot open another. Retry when "
        f"one of {ids} completes.\n"
    )
    assert nothing_left(control_plane, scene.namespace, S1)


def test_warm_reuse_passes_import_queries_at_ceiling_minus_one_and_counts_once(
    control_plane: ControlPlane, hook: WebhookProcess, scene_for
) -> None:
    scene = scene_for(hook)
    alice = scene.submitter().acquire()
    scene.busy(2, alice)
    bodies = [scene.ready(b) for b in elb.flow("warm-reuse", S1)]
    assert all(a.ok for a in alice.submit(bodies))
    # 3/3 now: import-queries is part of the holder's submit, not a fourth search.
    extra = scene.ready(elb.blast_batch(elb.search_id(2), 0, "other-db-x"))
    refused = alice.apply(extra)
    assert not refused.ok and "Gate B: 3/3 searches already active" in refused.stderr


def test_cloud_job_submission_batch_jobs_come_later_from_the_namespace_service_account(
    control_plane: ControlPlane, hook: WebhookProcess, scene_for, tmp_path: Path
) -> None:
    """The submit Job creates the batch Jobs in-cluster, as the namespace's ``default``
    ServiceAccount, after the submitter released the Lease and with the namespace at
    its ceiling: they join the search its submit Job opened."""
    scene = scene_for(hook)
    alice = scene.submitter().acquire()
    scene.busy(2, alice)
    bodies = [scene.ready(b) for b in elb.flow("cloud-job-submission", S1)]
    assert all(a.ok for a in alice.submit(bodies))
    alice.release()  # elastic-blast submit returned: the submit path releases the Lease
    submit_job = bodies[0]["metadata"]["name"]
    pod = wait_until(
        lambda: next(
            (
                p
                for p in control_plane.admin.list(
                    "pods", scene.namespace, label_selector=f"job-name={submit_job}"
                )
                if (p.get("status") or {}).get("phase") == "Running"
            ),
            None,
        ),
        120,
        f"the Pod of {submit_job} Running",
    )
    token = control_plane.pod_token(pod)
    in_cluster = control_plane.write_kubeconfig(
        tmp_path / "submit-jobs.kubeconfig", "submit-jobs", token, scene.namespace
    )
    batches = [scene.ready(elb.blast_batch(S1, n)) for n in range(3)]
    for batch in batches:
        applied = alice.apply(batch, kubeconfig=in_cluster)
        assert applied.ok, applied.stderr
    creators = {
        e["objectRef"]["name"]: e["user"]["username"]
        for e in requests_to(
            control_plane.audit_events(), "jobs", scene.namespace, verbs=["create"]
        )
        if (e.get("responseStatus") or {}).get("code") == 201
    }
    assert {creators[b["metadata"]["name"]] for b in batches} == {
        f"system:serviceaccount:{scene.namespace}:default"
    }
    # The same identity cannot open a search of its own: it holds no Lease.
    other = alice.apply(
        scene.ready(elb.blast_batch(elb.search_id(2), 0, "other-db-y")), kubeconfig=in_cluster
    )
    assert not other.ok and "Error from server (Forbidden)" in other.stderr
    assert (
        f"Gate A: Lease {scene.namespace}/elb-blast-submit-{scene.namespace} is not held by anyone"
        in other.stderr
    )


def test_a_refusal_is_logged_once_with_its_reason(
    control_plane: ControlPlane, hook: WebhookProcess, scene_for
) -> None:
    scene = scene_for(hook)
    alice = scene.submitter().acquire()
    scene.busy(3, alice)
    refused = alice.apply(scene.ready(elb.init_ssd(S1, 0)))
    assert not refused.ok
    records = [json.loads(line) for line in hook.log().splitlines() if line.startswith("{")]
    mine = [
        r for r in records if r.get("name") == refused.job and r.get("namespace") == scene.namespace
    ]
    assert [(r["decision"], r["reason"], r["code"]) for r in mine] == [("denied", "ceiling", 429)]
