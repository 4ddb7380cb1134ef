"""The real webhook process over TLS, called by the real API server, driven by kubectl.

What a person sees: ``kubectl create -f`` of elastic-blast's finalizer prints
``admission webhook "…" denied the request:`` and the gate's text.
"""

from __future__ import annotations

import http.client
import json
from datetime import datetime
from typing import Any

import pytest

from elbgate.lease import parse_microtime
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION
from testbed import elastic_blast as elb
from testbed.api import JsonObj
from testbed.clients import OpenApiLeaseClient
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.webhook.conftest import Seeder, decisions

pytestmark = pytest.mark.kubectl

DENIED = 'admission webhook "search-admission.elb-gate.io" denied the request: '
HOLDER = "openapi-6a1c0e6b5f8f4b83a1d2c3e4f5a6b7c8"


def create(cp: ControlPlane, user: str, obj: dict[str, Any], **kwargs: Any) -> Any:
    return cp.kubectl(user, "create", "-f", "-", input=json.dumps(obj), **kwargs)


def alice_acquires(cp: ControlPlane, ns: str) -> None:
    assert OpenApiLeaseClient.on(cp, "alice", ns, holder=HOLDER).acquire() == "acquired"


def test_a_finalizer_from_a_user_not_holding_the_lease_is_denied_by_gate_a(
    control_plane: ControlPlane, ns: str
) -> None:
    alice_acquires(control_plane, ns)
    job = elb.ready(elb.finalizer(elb.search_id()), ns)
    result = create(control_plane, "bob", job)
    assert result.returncode == 1
    stderr = result.stderr.strip()
    assert stderr.startswith('Error from server (Forbidden): error when creating "STDIN": ')
    assert DENIED + f"Gate A: user bob does not hold Lease {ns}/elb-blast-submit-{ns}" in stderr
    assert f"held by {HOLDER} (user alice)" in stderr
    assert f"acquire Lease {ns}/elb-blast-submit-{ns} before running elastic-blast submit" in stderr
    assert control_plane.admin.find("jobs", ns, job["metadata"]["name"]) is None


def test_a_finalizer_without_any_lease_says_to_acquire_it(
    control_plane: ControlPlane, ns: str
) -> None:
    result = create(control_plane, "alice", elb.ready(elb.finalizer(elb.search_id()), ns))
    assert result.returncode == 1
    assert DENIED + f"Gate A: Lease {ns}/elb-blast-submit-{ns} does not exist" in result.stderr


def test_the_holder_creates_the_finalizer_under_the_ceiling(
    control_plane: ControlPlane, seeded: Seeder
) -> None:
    ns, _ids = seeded(2)
    alice_acquires(control_plane, ns)
    job = elb.ready(elb.finalizer(elb.search_id()), ns)
    result = create(control_plane, "alice", job)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"job.batch/{job['metadata']['name']} created"


def test_at_the_ceiling_the_finalizer_is_denied_by_gate_b_with_the_active_ids(
    control_plane: ControlPlane, seeded: Seeder
) -> None:
    ns, ids = seeded(3)
    alice_acquires(control_plane, ns)
    result = create(control_plane, "alice", elb.ready(elb.finalizer(elb.search_id()), ns))
    assert result.returncode == 1
    stderr = result.stderr.strip()
    assert stderr.startswith(
        'Error from server (TooManyRequests): error when creating "STDIN": ' + DENIED
    )
    assert DENIED + f"Gate B: 3/3 searches already active in namespace {ns}" in stderr
    assert f"Retry when one of {', '.join(ids)} completes." in stderr


def pod_of(cp: ControlPlane, ns: str, job_name: str) -> JsonObj:
    """The Running Pod the Job controller made for ``job_name``."""

    def running() -> JsonObj | None:
        for pod in cp.admin.list("pods", ns, label_selector=f"job-name={job_name}"):
            if (pod.get("status") or {}).get("phase") == "Running":
                return pod
        return None

    found: JsonObj = wait_until(running, 120, f"a Running Pod of Job {ns}/{job_name}")
    return found


def token_of(cp: ControlPlane, pod: JsonObj) -> str:
    """A token of the Pod's ServiceAccount bound to the Pod, as the kubelet projects it."""
    return cp.pod_token(pod)


def test_the_in_cluster_submit_job_adds_batch_jobs_to_its_active_search_without_the_lease(
    control_plane: ControlPlane, hook: WebhookProcess, seeded: Seeder
) -> None:
    cp = control_plane
    ns, _ids = seeded(2)
    alice_acquires(cp, ns)
    job_id = elb.search_id()
    submit = elb.ready(elb.submit_jobs(job_id), ns)
    assert create(cp, "alice", submit).returncode == 0  # the third search: at the ceiling now
    # The batch Jobs are created from inside the submit Job's Pod, with the
    # token the kubelet gives it (the namespace's default ServiceAccount), and
    # no Lease: the search is already active.
    pod = pod_of(cp, ns, submit["metadata"]["name"])
    config = cp.write_kubeconfig(
        cp.state_dir / "kubeconfigs" / f"submit-{ns}.kubeconfig",
        f"submit-{ns}",
        token_of(cp, pod),
        ns,
    )
    for number in range(2):
        result = create(cp, "", elb.ready(elb.blast_batch(job_id, number), ns), kubeconfig=config)
        assert result.returncode == 0, result.stderr
    batch = [r for r in decisions(hook, ns) if str(r["name"]).startswith("blastn-")]
    assert [(r["decision"], r["user"]) for r in batch] == [
        ("allowed", f"system:serviceaccount:{ns}:default")
    ] * 2


def test_job_controller_updates_and_deletes_pass_without_the_lease(
    control_plane: ControlPlane, seeded: Seeder
) -> None:
    ns, [job_id] = seeded(1)
    name = elb.ready(elb.blast_batch(job_id, 0), ns)["metadata"]["name"]
    labelled = control_plane.kubectl("bob", "-n", ns, "label", "job", name, "tier=batch")
    assert labelled.returncode == 0, labelled.stderr
    assert labelled.stdout.strip() == f"job.batch/{name} labeled"
    deleted = control_plane.kubectl("bob", "-n", ns, "delete", "job", name)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == f'job.batch "{name}" deleted from {ns} namespace'


def test_relabelling_a_job_into_another_search_is_judged(
    control_plane: ControlPlane, seeded: Seeder
) -> None:
    ns, [job_id] = seeded(1)
    name = elb.ready(elb.blast_batch(job_id, 0), ns)["metadata"]["name"]
    result = control_plane.kubectl(
        "bob", "-n", ns, "label", "--overwrite", "job", name, "elb-job-id=other"
    )
    assert result.returncode == 1
    assert DENIED + f"Gate A: Lease {ns}/elb-blast-submit-{ns} does not exist" in result.stderr


def test_a_server_side_dry_run_gets_the_same_answer_and_writes_nothing(
    control_plane: ControlPlane, ns: str
) -> None:
    job = elb.ready(elb.finalizer(elb.search_id()), ns)
    result = control_plane.kubectl(
        "bob", "create", "--dry-run=server", "-f", "-", input=json.dumps(job)
    )
    assert result.returncode == 1 and DENIED + "Gate A" in result.stderr
    assert control_plane.admin.find("jobs", ns, job["metadata"]["name"]) is None


def test_a_namespace_listed_at_start_is_gated_and_sigterm_stops_cleanly(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    listed = control_plane.new_namespace("listed")
    fresh = f"{listed}-new"
    process = WebhookProcess(control_plane, namespaces=[listed, fresh]).start()
    try:
        for name in (listed, fresh):
            labels = control_plane.admin.get("namespaces", None, name)["metadata"]["labels"]
            assert labels["elb-gate.io/gated"] == "true"
        result = create(control_plane, "bob", elb.ready(elb.finalizer(elb.search_id()), listed))
        assert result.returncode == 1 and DENIED + "Gate A" in result.stderr
    finally:
        code = process.stop()
        hook.register()  # the module's process serves the later tests again
    assert code == 0  # SIGTERM: in-flight reviews finished, clean exit


def test_ungated_namespaces_are_not_judged(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    ns = control_plane.new_namespace("not-gated")
    job = elb.ready(elb.finalizer(elb.search_id()), ns)
    result = create(control_plane, "admin", job)
    assert result.returncode == 0, result.stderr
    assert control_plane.admin.find("jobs", ns, job["metadata"]["name"]) is not None
    assert decisions(hook, ns) == []  # the API server never called the webhook


def test_the_lease_is_stamped_with_user_pod_and_the_webhook_clock(
    control_plane: ControlPlane, ns: str
) -> None:
    openapi = control_plane.pod_identity(ns, "elb-openapi")
    client = OpenApiLeaseClient.on(control_plane, openapi, ns, holder=HOLDER, clock_offset=-7200)
    assert client.acquire() == "acquired"
    stored = control_plane.admin.get("leases", ns, f"elb-blast-submit-{ns}")
    annotations = stored["metadata"]["annotations"]
    assert annotations[HOLDER_USER_ANNOTATION] == openapi.username
    assert annotations[HOLDER_POD_ANNOTATION] == openapi.stamp
    # The client's clock is two hours behind; the stored times are the webhook's.
    assert client.sent[-1]["spec"]["renewTime"] < stored["spec"]["renewTime"]
    created = parse_microtime(stored["metadata"]["creationTimestamp"])
    for field in ("renewTime", "acquireTime"):
        stamped = parse_microtime(stored["spec"][field])
        assert isinstance(created, datetime) and isinstance(stamped, datetime)
        assert abs((stamped - created).total_seconds()) < 60


def test_every_decision_is_logged_as_one_json_line(
    control_plane: ControlPlane, hook: WebhookProcess, ns: str
) -> None:
    create(control_plane, "bob", elb.ready(elb.finalizer(elb.search_id()), ns))
    mine = decisions(hook, ns)
    assert mine and mine[-1]["decision"] == "denied" and mine[-1]["reason"] == "no_lease"
    assert {"uid", "name", "operation", "user", "duration_ms"} <= set(mine[-1])
    assert mine[-1]["user"] == "bob"


def test_metrics_count_the_decisions(
    control_plane: ControlPlane, hook: WebhookProcess, ns: str
) -> None:
    series = (
        'elb_gate_admission_requests_total{decision="denied",operation="CREATE",'
        'reason="no_lease",webhook="search-admission.elb-gate.io"} '
    )

    def no_lease_denials() -> float:
        (line,) = [x for x in hook.metrics().splitlines() if x.startswith(series)]
        return float(line.split()[-1])

    before = no_lease_denials()  # exported from start, at 0 until the first one
    create(control_plane, "bob", elb.ready(elb.finalizer(elb.search_id()), ns))
    assert no_lease_denials() == before + 1
    assert "elb_gate_certificate_expiry_timestamp_seconds" in hook.metrics()


def rejected_total(hook: WebhookProcess, webhook: str, code: int, reason: str) -> float:
    series = (
        f'elb_gate_admission_rejected_total{{code="{code}",reason="{reason}",webhook="{webhook}"}} '
    )
    (line,) = [x for x in hook.metrics().splitlines() if x.startswith(series)]
    return float(line.split()[-1])


def post_raw(hook: WebhookProcess, path: str, body: bytes, content_type: str) -> int:
    """POST to the webhook's HTTPS port as a caller that is not the API server would."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", hook.port, context=hook.client_context(), timeout=30
    )
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": content_type})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


REVIEW = json.dumps(
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}
).encode()
BAD_REQUESTS = [
    ("/validate/jobs", b"{not json", "application/json", 400, "not_json"),
    (
        "/validate/leases",
        b'{"kind": "AdmissionReview"}',
        "application/json",
        400,
        "not_admission_review",
    ),
    ("/mutate/leases", REVIEW, "text/plain", 415, "content_type"),
    (
        "/validate/jobs",
        b"{" + b" " * (8 * 1024 * 1024) + b"}",
        "application/json",
        413,
        "too_large",
    ),
]
WEBHOOK_OF = {
    "/validate/jobs": "search-admission.elb-gate.io",
    "/validate/leases": "lease-guard.elb-gate.io",
    "/mutate/leases": "lease-stamp.elb-gate.io",
}


def test_every_4xx_answer_is_counted_by_its_reason_from_zero_and_logged(
    hook: WebhookProcess,
) -> None:
    before = {
        (path, reason): rejected_total(hook, WEBHOOK_OF[path], code, reason)
        for path, _body, _type, code, reason in BAD_REQUESTS
    }
    # Exported from start: each series is there, at 0, before its first request.
    assert set(before.values()) == {0.0}
    for path, body, content_type, code, _reason in BAD_REQUESTS:
        assert post_raw(hook, path, body, content_type) == code
    for path, _body, _type, code, reason in BAD_REQUESTS:
        webhook = WEBHOOK_OF[path]
        assert rejected_total(hook, webhook, code, reason) == before[(path, reason)] + 1
    rejected = [
        json.loads(line)
        for line in hook.log().splitlines()
        if line.startswith("{") and json.loads(line).get("msg") == "request rejected"
    ]
    for path, _body, _type, code, reason in BAD_REQUESTS:
        assert any(
            (r["path"], r["code"], r["reason"], r["webhook"], r["level"])
            == (path, code, reason, WEBHOOK_OF[path], "warning")
            for r in rejected
        ), (path, reason)
