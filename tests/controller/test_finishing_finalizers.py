"""Never delete work in progress: a finalizer whose search had batch work is recorded as
such on the object, so it is *finishing* — never an orphan, never deleted — after the
real TTL-after-finished controller removed its batch Jobs, and after a controller
restart. Only a finalizer whose batch work never appeared is an orphan.

The real webhook (default settings) and real controllers; the controllers run at the
default settings except where a test says: a 5 s finalizer grace instead of 300 s (the
grace is only how long a lone finalizer waits for its batch work; 300 s would make
each test wait five minutes for the same decision), and the orphan policy under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from elbgate.names import BATCH_WORK_SEEN_ANNOTATION, ORPHANED_SINCE_ANNOTATION
from testbed import elastic_blast as elb
from testbed import holders
from testbed.controller_process import ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.holders import AT_DEFAULTS, AuditLog, Stage, settle, utc
from testbed.waiting import wait_until
from tests.controller.observed import events, job_annotations, liveness
from tests.graph.submitter import Submitter

GRACE_SECONDS = 5
TTL_CONTROLLER = "system:serviceaccount:kube-system:ttl-after-finished-controller"
SHORT_GRACE = {"BLAST_FINALIZER_GRACE_SECONDS": str(GRACE_SECONDS)}
DELETE_AT_ONCE = {
    **SHORT_GRACE,
    "ELB_GATE_ORPHAN_POLICY": "delete",
    "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "0",
}


@pytest.fixture(scope="module")
def webhook_env() -> dict[str, str]:
    return {}  # the shipped settings, not the package's short Leases


@dataclass(frozen=True)
class Search:
    """A search whose batch Jobs ran, finished and were TTL-deleted; its finalizer runs."""

    namespace: str
    job_id: str
    finalizer: str
    batch: tuple[str, ...]
    recorded_at: datetime
    """When the controller's record of the batch work landed (API server clock)."""
    batch_deleted_at: tuple[datetime, ...]
    """When the TTL-after-finished controller deleted each batch Job (API server clock)."""


def controller_writes(audit: AuditLog, ns: str, job: str) -> list[dict[str, Any]]:
    return [e for e in audit.job_writes(ns, job) if e["verb"] in ("patch", "update", "delete")]


def search_past_its_batch_jobs(cp: ControlPlane, on: Stage, ns: str) -> Search:
    """ElasticBLAST's direct submit: batch Jobs (finishing after 2 s, TTL 2 s), then the
    finalizer (still merging), all under the Lease; then wait until the real TTL
    controller has deleted the batch Jobs and the finalizer is past its grace."""
    submitter = Submitter(cp, ns, "alice", source="cli")
    job_id = elb.search_id()
    with submitter.holding():
        batch = submitter.create(
            *(elb.ready(elb.blast_batch(job_id, n, ttl=2), ns, run_seconds=2) for n in range(2))
        )
        (fin,) = submitter.create(elb.ready(elb.finalizer(job_id), ns))
    name = fin["metadata"]["name"]
    wait_until(
        lambda: BATCH_WORK_SEEN_ANNOTATION in job_annotations(cp, ns, name),
        120,
        "batch work recorded",
    )
    (record,) = controller_writes(on.audit, ns, name)
    batch_names = tuple(j["metadata"]["name"] for j in batch)
    deleted_at = []
    for job in batch_names:

        def gone(job: str = job) -> bool:
            return cp.admin.find("jobs", ns, job) is None

        wait_until(gone, 120, f"{job} TTL-deleted")
        deleted = [e for e in on.audit.job_writes(ns, job, TTL_CONTROLLER) if e["verb"] == "delete"]
        assert deleted, f"{job} was not deleted by the TTL-after-finished controller"
        deleted_at.append(utc(deleted[0]["stageTimestamp"]))
    born = utc(fin["metadata"]["creationTimestamp"])
    past_grace = born + timedelta(seconds=GRACE_SECONDS + 1)
    wait_until(lambda: datetime.now(UTC) > past_grace, 60, "the finalizer grace to pass")
    settle(cp, on.leader(), ns)
    return Search(ns, job_id, name, batch_names, utc(record["stageTimestamp"]), tuple(deleted_at))


def census(cp: ControlPlane, ns: str) -> dict[str, Any]:
    """``elb-gate census -o json`` as an operator sees it (same finalizer grace)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ELB_GATE_", "BLAST_"))},
        **SHORT_GRACE,
        "KUBECONFIG": cp.kubeconfig("operator"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "client", "census", "-n", ns, "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def assert_finishing(cp: ControlPlane, on: Stage, ctl: ControllerProcess, search: Search) -> None:
    """Recorded, never marked, never deleted, no Event; finishing; the namespace in use."""
    ns, name = search.namespace, search.finalizer
    found = job_annotations(cp, ns, name)
    assert BATCH_WORK_SEEN_ANNOTATION in found
    assert ORPHANED_SINCE_ANNOTATION not in found
    writes = controller_writes(on.audit, ns, name)
    assert [e["verb"] for e in writes] == ["patch"]  # the record, nothing else
    assert not events(cp, ns, "OrphanedFinalizer")
    assert not events(cp, ns, "OrphanedFinalizerDeleted")
    report = census(cp, ns)
    assert [f["name"] for f in report["finishing"]] == [name]
    assert report["orphans"] == [] and report["active"] == 0
    assert liveness(cp, ns)["inUse"] == "true"
    served = ctl.get_json("/liveness")["namespaces"][ns]
    assert served["inUse"] is True
    assert ctl.metric("elb_gate_orphaned_finalizers", {"namespace": ns}) == 0


def test_a_finalizer_whose_batch_jobs_were_ttl_deleted_is_finishing_and_never_collected(
    control_plane: ControlPlane, ns: str
) -> None:
    with holders.controllers(control_plane, [ns], env=DELETE_AT_ONCE) as on:
        search = search_past_its_batch_jobs(control_plane, on, ns)
        # Recorded at first sight, while the batch Jobs still existed: the order of two
        # API-server times, not a bound on seconds that a busy machine can miss.
        assert all(search.recorded_at < gone for gone in search.batch_deleted_at)
        assert_finishing(control_plane, on, on.leader(), search)


def test_a_controller_restarted_after_the_batch_jobs_were_deleted_still_leaves_it_alone(
    control_plane: ControlPlane, ns: str
) -> None:
    with holders.controllers(control_plane, [ns], env=DELETE_AT_ONCE) as on:
        search = search_past_its_batch_jobs(control_plane, on, ns)
        on.leader().kill()  # SIGKILL: its memory of the batch Jobs dies with it
        successor = ControllerProcess.start(
            control_plane, name="controller-1", namespaces=[ns], env=DELETE_AT_ONCE, **AT_DEFAULTS
        )
        on.controllers.append(successor)
        successor.wait_until(successor.is_leader, 60, "the new controller leads")
        settle(control_plane, successor, ns, rounds=3)
        assert_finishing(control_plane, on, successor, search)


def lone_finalizer(cp: ControlPlane, ns: str) -> str:
    """A finalizer created under the Lease whose batch work never appears."""
    submitter = Submitter(cp, ns, "alice", source="cli")
    with submitter.holding():
        (fin,) = submitter.create(elb.ready(elb.finalizer(elb.search_id()), ns))
    return str(fin["metadata"]["name"])


def marked(cp: ControlPlane, ns: str, name: str) -> str | None:
    return job_annotations(cp, ns, name).get(ORPHANED_SINCE_ANNOTATION)


def test_a_true_orphan_under_the_default_policy_is_flagged_and_never_deleted(
    control_plane: ControlPlane, ns: str
) -> None:
    with holders.controllers(control_plane, [ns], env=SHORT_GRACE) as on:
        ctl = on.leader()
        name = lone_finalizer(control_plane, ns)
        wait_until(lambda: marked(control_plane, ns, name), 60, "the orphan marked")
        (warning,) = wait_until(
            lambda: events(control_plane, ns, "OrphanedFinalizer"), 30, "the Warning Event"
        )
        assert warning["type"] == "Warning" and name in warning["message"]
        assert "will not be deleted" in warning["message"]
        ctl.wait_until(
            lambda: ctl.metric("elb_gate_orphaned_finalizers", {"namespace": ns}) == 1,
            30,
            "the orphan gauge at 1",
        )
        settle(control_plane, ctl, ns, rounds=3)
        assert control_plane.admin.find("jobs", ns, name) is not None
        assert [e["verb"] for e in controller_writes(on.audit, ns, name)] == ["patch"]
        assert not events(control_plane, ns, "OrphanedFinalizerDeleted")
        assert [o["name"] for o in census(control_plane, ns)["orphans"]] == [name]


def test_a_true_orphan_under_policy_delete_is_deleted_after_the_delete_grace(
    control_plane: ControlPlane, ns: str
) -> None:
    # A 3 s delete grace instead of 900 s: the grace is a wait, the decision the same.
    env = {**DELETE_AT_ONCE, "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS": "3"}
    with holders.controllers(control_plane, [ns], env=env) as on:
        name = lone_finalizer(control_plane, ns)
        since = wait_until(lambda: marked(control_plane, ns, name), 60, "the orphan marked")
        wait_until(lambda: control_plane.admin.find("jobs", ns, name) is None, 60, "deleted")
        (deletion,) = [e for e in controller_writes(on.audit, ns, name) if e["verb"] == "delete"]
        assert utc(deletion["stageTimestamp"]) >= utc(since) + timedelta(seconds=3)
        wait_until(lambda: events(control_plane, ns, "OrphanedFinalizerDeleted"), 30, "the Event")


def test_batch_work_appearing_for_a_flagged_orphan_is_recorded_and_unflags_it_in_one_patch(
    control_plane: ControlPlane, ns: str
) -> None:
    with holders.controllers(control_plane, [ns], env=SHORT_GRACE) as on:
        submitter = Submitter(control_plane, ns, "alice", source="cli")
        job_id = elb.search_id()
        with submitter.holding():
            (fin,) = submitter.create(elb.ready(elb.finalizer(job_id), ns))
        name = fin["metadata"]["name"]
        wait_until(lambda: marked(control_plane, ns, name), 60, "the orphan marked")
        before = len(controller_writes(on.audit, ns, name))
        # Its submit Job comes after all (cloud job submission, late).
        with submitter.holding():
            submitter.create(elb.ready(elb.submit_jobs(job_id), ns))
        wait_until(lambda: marked(control_plane, ns, name) is None, 30, "the mark removed")
        found = job_annotations(control_plane, ns, name)
        assert found[BATCH_WORK_SEEN_ANNOTATION].endswith(f"submit/submit-jobs-{job_id[-8:]}")
        settle(control_plane, on.leader(), ns)
        (patch,) = controller_writes(on.audit, ns, name)[before:]
        written = patch["requestObject"]["metadata"]["annotations"]
        assert written[ORPHANED_SINCE_ANNOTATION] is None
        assert written[BATCH_WORK_SEEN_ANNOTATION] == found[BATCH_WORK_SEEN_ANNOTATION]


@pytest.mark.parametrize("env", [SHORT_GRACE, DELETE_AT_ONCE], ids=["policy warn", "policy delete"])
def test_a_search_whose_batch_jobs_were_ttl_deleted_while_no_controller_ran_is_finishing(
    control_plane: ControlPlane, ns: str, env: dict[str, str]
) -> None:
    """No controller runs while the batch Jobs run, finish and are TTL-deleted (a rollout,
    an outage; the real templates' TTL is 1800 s, here 2 s): the controller that starts
    afterwards sees only the running finalizer, past its grace. What it learns from the
    webhook's admission record, written when the batch work was admitted, keeps it from
    flagging, uncounting or deleting the finalizer."""
    cp = control_plane
    submitter = Submitter(cp, ns, "alice", source="cli")
    job_id = elb.search_id()
    with submitter.holding():
        batch = submitter.create(
            *(elb.ready(elb.blast_batch(job_id, n, ttl=2), ns, run_seconds=2) for n in range(2))
        )
        (fin,) = submitter.create(elb.ready(elb.finalizer(job_id), ns))
    name = fin["metadata"]["name"]
    batch_names = tuple(j["metadata"]["name"] for j in batch)
    for job in batch_names:

        def gone(job: str = job) -> bool:
            return cp.admin.find("jobs", ns, job) is None

        wait_until(gone, 120, f"{job} TTL-deleted while no controller runs")
    born = utc(fin["metadata"]["creationTimestamp"])
    past_grace = born + timedelta(seconds=GRACE_SECONDS + 1)
    wait_until(lambda: datetime.now(UTC) > past_grace, 60, "the finalizer grace to pass")
    assert not job_annotations(cp, ns, name)  # nothing was recorded on it meanwhile
    with holders.controllers(cp, [ns], env=env) as on:
        ctl = on.leader()
        settle(cp, ctl, ns, rounds=3)
        assert cp.admin.find("jobs", ns, name) is not None, "the running finalizer was deleted"
        # No controller saw the batch Jobs: the record comes from the admission record,
        # and their deletions were seen by none (assert_finishing reads neither time).
        assert_finishing(cp, on, ctl, Search(ns, job_id, name, batch_names, born, ()))
