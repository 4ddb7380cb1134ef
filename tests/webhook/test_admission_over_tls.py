"""The real webhook process over TLS, called by the emulator's admission chain, driven by kubectl.

What a person sees: ``kubectl create -f`` of elastic-blast's finalizer prints
``admission webhook "…" denied the request:`` and the gate's text.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from elbgate.lease import parse_microtime
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION
from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl
from tests.support.webhook_process import WebhookProcess
from tests.webhook.lease_clients import KubectlLeaseClient
from tests.webhook.shapes import finalizer_job, new_job_id, search_job

pytestmark = pytest.mark.kubectl

DENIED = 'admission webhook "search-admission.elb-gate.io" denied the request: '
HOLDER = "openapi-6a1c0e6b5f8f4b83a1d2c3e4f5a6b7c8"


def create(emu: Emulator, user: str, obj: dict[str, Any]) -> Any:
    return kubectl(emu, user, "create", "-f", "-", input=json.dumps(obj))


def alice_acquires(emu: Emulator, ns: str) -> None:
    assert KubectlLeaseClient(emu, "alice", ns, HOLDER).acquire() == "acquired"


def seed_active_searches(emu: Emulator, ns: str, count: int) -> list[str]:
    """``count`` searches with running blast Jobs, written directly (no admission)."""
    ids = sorted(new_job_id() for _ in range(count))
    for job_id in ids:
        emu.create(search_job("blast", ns, job_id))
    return ids


def test_a_finalizer_from_a_user_not_holding_the_lease_is_denied_by_gate_a(
    emu: Emulator, ns: str
) -> None:
    alice_acquires(emu, ns)
    job = finalizer_job(ns, new_job_id())
    result = create(emu, "bob", job)
    assert result.returncode == 1
    stderr = result.stderr.strip()
    assert stderr.startswith('Error from server (Forbidden): error when creating "STDIN": ')
    assert DENIED + f"Gate A: user bob does not hold Lease {ns}/elb-blast-submit-{ns}" in stderr
    assert f"held by {HOLDER} (user alice)" in stderr
    assert f"acquire Lease {ns}/elb-blast-submit-{ns} before running elastic-blast submit" in stderr
    assert emu.find("jobs", ns, job["metadata"]["name"]) is None


def test_a_finalizer_without_any_lease_says_to_acquire_it(emu: Emulator, ns: str) -> None:
    result = create(emu, "alice", finalizer_job(ns, new_job_id()))
    assert result.returncode == 1
    assert DENIED + f"Gate A: Lease {ns}/elb-blast-submit-{ns} does not exist" in result.stderr


def test_the_holder_creates_the_finalizer_under_the_ceiling(emu: Emulator, ns: str) -> None:
    alice_acquires(emu, ns)
    seed_active_searches(emu, ns, 2)
    job = finalizer_job(ns, new_job_id())
    result = create(emu, "alice", job)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"job.batch/{job['metadata']['name']} created"


def test_at_the_ceiling_the_finalizer_is_denied_by_gate_b_with_the_active_ids(
    emu: Emulator, ns: str
) -> None:
    alice_acquires(emu, ns)
    ids = seed_active_searches(emu, ns, 3)
    result = create(emu, "alice", finalizer_job(ns, new_job_id()))
    assert result.returncode == 1
    stderr = result.stderr.strip()
    assert stderr.startswith("Error from server (TooManyRequests)")
    assert DENIED + f"Gate B: 3/3 searches already active in namespace {ns}" in stderr
    assert f"Retry when one of {', '.join(ids)} completes." in stderr


def test_the_in_cluster_submit_job_adds_batch_jobs_to_its_active_search_without_the_lease(
    emu: Emulator, ns: str
) -> None:
    alice_acquires(emu, ns)
    job_id = new_job_id()
    assert create(emu, "alice", search_job("submit", ns, job_id)).returncode == 0
    seed_active_searches(emu, ns, 2)  # the namespace is now at the ceiling
    for i in range(2):
        blast = search_job("blast", ns, job_id, f"elb-blast-{job_id[-8:]}-{i}")
        result = create(emu, "elb-submit", blast)
        assert result.returncode == 0, result.stderr


def test_job_controller_updates_and_deletes_pass_without_the_lease(emu: Emulator, ns: str) -> None:
    [job_id] = seed_active_searches(emu, ns, 1)
    name = f"elb-blast-{job_id[-8:]}"
    labelled = kubectl(emu, "bob", "-n", ns, "label", "job", name, "tier=batch")
    assert labelled.returncode == 0, labelled.stderr
    deleted = kubectl(emu, "bob", "-n", ns, "delete", "job", name)
    assert deleted.returncode == 0, deleted.stderr


def test_relabelling_a_job_into_another_search_is_judged(emu: Emulator, ns: str) -> None:
    [job_id] = seed_active_searches(emu, ns, 1)
    name = f"elb-blast-{job_id[-8:]}"
    result = kubectl(emu, "bob", "-n", ns, "label", "--overwrite", "job", name, "elb-job-id=other")
    assert result.returncode == 1
    assert DENIED + f"Gate A: Lease {ns}/elb-blast-submit-{ns} does not exist" in result.stderr


def test_a_server_side_dry_run_gets_the_same_answer_and_writes_nothing(
    emu: Emulator, ns: str
) -> None:
    job = finalizer_job(ns, new_job_id())
    result = kubectl(emu, "bob", "create", "--dry-run=server", "-f", "-", input=json.dumps(job))
    assert result.returncode == 1 and DENIED + "Gate A" in result.stderr


def test_a_namespace_listed_at_start_is_gated_and_sigterm_stops_cleanly(
    emu: Emulator, hook: WebhookProcess
) -> None:
    emu.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "listed"}})
    process = WebhookProcess(emu, namespaces=["listed", "created-by-start"]).start()
    try:
        for name in ("listed", "created-by-start"):
            labels = emu.get("namespaces", None, name)["metadata"]["labels"]
            assert labels["elb-gate.io/gated"] == "true"
        result = create(emu, "bob", finalizer_job("listed", new_job_id()))
        assert result.returncode == 1 and DENIED + "Gate A" in result.stderr
    finally:
        code = process.stop()
        hook.register()  # the module's process serves the later tests again
    assert code == 0  # SIGTERM: in-flight reviews finished, clean exit


def test_ungated_namespaces_are_not_judged(emu: Emulator, hook: WebhookProcess) -> None:
    emu.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "not-gated"}})
    result = create(emu, "bob", finalizer_job("not-gated", new_job_id()))
    assert result.returncode == 0, result.stderr


def test_the_lease_is_stamped_with_user_pod_and_the_webhook_clock(emu: Emulator, ns: str) -> None:
    assert KubectlLeaseClient(emu, "openapi", ns, HOLDER, clock_offset=-7200).acquire() == (
        "acquired"
    )
    stored = emu.get("leases", ns, f"elb-blast-submit-{ns}")
    annotations = stored["metadata"]["annotations"]
    assert annotations[HOLDER_USER_ANNOTATION] == "system:serviceaccount:default:openapi"
    assert annotations[HOLDER_POD_ANNOTATION] == "default/openapi-7f9/pod-uid-1"
    # The client's clock is two hours behind; the stored times are the webhook's.
    created = parse_microtime(stored["metadata"]["creationTimestamp"])
    for field in ("renewTime", "acquireTime"):
        stamped = parse_microtime(stored["spec"][field])
        assert isinstance(created, datetime) and isinstance(stamped, datetime)
        assert abs((stamped - created).total_seconds()) < 60


def test_every_decision_is_logged_as_one_json_line(
    emu: Emulator, hook: WebhookProcess, ns: str
) -> None:
    create(emu, "bob", finalizer_job(ns, new_job_id()))
    lines = [json.loads(line) for line in hook.log().splitlines() if line.startswith("{")]
    mine = [
        line for line in lines if line.get("msg") == "admission" and line.get("namespace") == ns
    ]
    assert mine and mine[-1]["decision"] == "denied" and mine[-1]["reason"] == "no_lease"
    assert {"uid", "name", "operation", "user", "duration_ms"} <= set(mine[-1])


def test_metrics_count_the_decisions(emu: Emulator, hook: WebhookProcess, ns: str) -> None:
    create(emu, "bob", finalizer_job(ns, new_job_id()))
    text = hook.metrics()
    assert (
        'elb_gate_admission_requests_total{decision="denied",operation="CREATE",'
        'reason="no_lease",webhook="search-admission.elb-gate.io"}'
    ) in text
    assert "elb_gate_certificate_expiry_timestamp_seconds" in text
