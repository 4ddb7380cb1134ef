"""The real API server's behaviours elb-gate depends on, shown on the control plane itself.

Each of these differs from what the retired home-made emulator did, and each
shapes elb-gate's code: the Lease writers must send MicroTimes with exactly six
fractional digits, a Lease update must be conditional, a PUT to a missing
Lease is a CREATE for admission, a Job's template is immutable, and the
webhook configurations' CEL is compiled (and type-checked) by the API server.

The fast tier is enough: every behaviour here is the API server's own, whatever serves
the webhook (``point_at`` only gives the configurations an address).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from elbgate.lease import format_microtime
from testbed.api import ApiError
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess, point_at, shipped_configurations


def lease(ns: str, name: str, renew: str, holder: str = "openapi-1") -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 900,
            "acquireTime": renew,
            "renewTime": renew,
        },
    }


@pytest.mark.parametrize(
    "renew", ["2026-11-30T12:00:00.123Z", "2026-11-30T12:00:00.123456789Z", "2026-11-30T12:00:00Z"]
)
def test_a_microtime_without_exactly_six_fractional_digits_is_refused_with_400(
    control_plane: ControlPlane, renew: str
) -> None:
    ns = control_plane.new_namespace("microtime")
    with pytest.raises(ApiError) as refused:
        control_plane.admin.create(lease(ns, "other", renew))
    assert refused.value.status == 400
    assert "renewTime" in refused.value.message or "cannot parse" in refused.value.message


def test_elb_gates_microtime_format_is_the_one_the_api_server_takes(
    control_plane: ControlPlane,
) -> None:
    ns = control_plane.new_namespace("microtime")
    renew = format_microtime(datetime.now(UTC))
    stored = control_plane.admin.create(lease(ns, "other", renew))
    assert stored["spec"]["renewTime"] == renew
    assert len(renew.split(".")[1]) == len("000000Z")


def test_an_unconditional_lease_update_is_refused_with_422(control_plane: ControlPlane) -> None:
    ns = control_plane.new_namespace("cas")
    created = control_plane.admin.create(lease(ns, "other", format_microtime(datetime.now(UTC))))
    body = json.loads(json.dumps(created))
    del body["metadata"]["resourceVersion"]
    with pytest.raises(ApiError) as refused:
        control_plane.admin.update(body)
    assert refused.value.status == 422
    assert "resourceVersion" in refused.value.message


def test_a_put_to_a_missing_submit_lease_is_admitted_as_a_create(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    ns = hook.install.gate(control_plane.new_namespace("put-create"))
    name = f"elb-blast-submit-{ns}"
    api = control_plane.api("alice")
    now = format_microtime(datetime.now(UTC))
    api.request("PUT", api.resource("leases").path(ns, name), lease(ns, name, now))
    stored = control_plane.admin.get("leases", ns, name)
    assert stored["metadata"]["annotations"]["elb-gate.io/holder-user"] == "alice"
    records = [json.loads(line) for line in hook.log().splitlines() if name in line and "{" in line]
    assert any(r.get("operation") == "CREATE" for r in records), records


def test_a_jobs_pod_template_is_immutable(control_plane: ControlPlane) -> None:
    ns = control_plane.new_namespace("immutable")
    control_plane.admin.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": ns},
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
    )
    # A JSON patch carries no resourceVersion: the Job controller's own status
    # writes cannot turn the answer into a 409.
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "alpine"}]
    with pytest.raises(ApiError) as refused:
        control_plane.admin.patch("jobs", ns, "j", patch, kind="json")
    assert refused.value.status == 422
    assert "field is immutable" in refused.value.message


def test_the_shipped_webhook_configurations_compile_in_the_api_server(
    control_plane: ControlPlane,
) -> None:
    docs = point_at(shipped_configurations(), 9, "")
    for doc in docs:
        doc["metadata"]["name"] = "compile-check"
        for hook in doc["webhooks"]:
            hook["clientConfig"].pop("caBundle")
        created = control_plane.admin.create(doc, dryRun="All")
        assert created["webhooks"][0]["matchConditions"]


@pytest.mark.parametrize(
    "expression",
    [
        "request.nosuchfield == 'CREATE'",  # type-checked against AdmissionRequest
        "object.metadata.labels['app'] in ['finalizer'",  # does not parse
        "request.name.startsWith(1)",  # no such overload
    ],
)
def test_a_bad_match_condition_is_refused_at_configuration_time(
    control_plane: ControlPlane, expression: str
) -> None:
    doc = point_at(shipped_configurations(), 9, "")[0]
    doc["metadata"]["name"] = "compile-check"
    doc["webhooks"][0]["clientConfig"].pop("caBundle")
    doc["webhooks"][0]["matchConditions"] = [{"name": "bad", "expression": expression}]
    with pytest.raises(ApiError) as refused:
        control_plane.admin.create(doc, dryRun="All")
    assert refused.value.status == 422
    assert "matchConditions" in refused.value.message


def _critical_pod(ns: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "critical", "namespace": ns},
        "spec": {
            "priorityClassName": "system-cluster-critical",
            "containers": [{"name": "c", "image": "elb-gate:0.1.0"}],
        },
    }


def test_a_critical_priority_pod_needs_a_quota_that_admits_it(control_plane: ControlPlane) -> None:
    # As on managed clusters: system-cluster-critical outside kube-system only
    # where a ResourceQuota scoped to that class exists (the chart ships one).
    ns = control_plane.new_namespace("critical")
    with pytest.raises(ApiError) as refused:
        control_plane.admin.create(_critical_pod(ns), dryRun="All")
    # The API server answers this one with a 500, not a 403.
    assert refused.value.status == 500
    assert "insufficient quota to match these scopes" in refused.value.message
    control_plane.admin.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "critical-pods", "namespace": ns},
            "spec": {
                "hard": {"pods": "2"},
                "scopeSelector": {
                    "matchExpressions": [
                        {
                            "scopeName": "PriorityClass",
                            "operator": "In",
                            "values": ["system-cluster-critical"],
                        }
                    ]
                },
            },
        }
    )
    wait_until(lambda: _admitted(control_plane, ns), 60, "the quota to admit a critical pod")


def _admitted(control_plane: ControlPlane, ns: str) -> bool:
    try:
        control_plane.admin.create(_critical_pod(ns), dryRun="All")
    except ApiError:
        return False
    return True
