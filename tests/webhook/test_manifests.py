"""manifests/base/admission-webhooks.yaml: valid, as contracted, and its CEL lets through only gated writes."""

from __future__ import annotations

from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml

from elbgate.label_values import NEAR_MISS_APP_PATTERN
from testbed.webhook_process import MANIFEST
from webhook.http import JOBS_PATH, LEASE_MUTATE_PATH, LEASE_VALIDATE_PATH

DOCS = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
HOOKS = {hook["name"]: (doc["kind"], hook) for doc in DOCS for hook in doc["webhooks"]}


def test_both_configurations_are_valid_kubernetes_objects() -> None:
    assert [(d["kind"], d["metadata"]["name"]) for d in DOCS] == [
        ("ValidatingWebhookConfiguration", "elb-gate"),
        ("MutatingWebhookConfiguration", "elb-gate"),
    ]
    for doc in DOCS:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


@pytest.mark.parametrize(
    ("name", "kind", "path", "group", "resource", "operations"),
    [
        (
            "search-admission.elb-gate.io",
            "ValidatingWebhookConfiguration",
            JOBS_PATH,
            "batch",
            "jobs",
            ["CREATE", "UPDATE"],
        ),
        (
            "lease-guard.elb-gate.io",
            "ValidatingWebhookConfiguration",
            LEASE_VALIDATE_PATH,
            "coordination.k8s.io",
            "leases",
            ["CREATE", "UPDATE", "DELETE"],
        ),
        (
            "lease-stamp.elb-gate.io",
            "MutatingWebhookConfiguration",
            LEASE_MUTATE_PATH,
            "coordination.k8s.io",
            "leases",
            ["CREATE", "UPDATE"],
        ),
    ],
)
def test_each_webhook_is_wired_as_the_contract_says(
    name: str, kind: str, path: str, group: str, resource: str, operations: list[str]
) -> None:
    hook_kind, hook = HOOKS[name]
    assert hook_kind == kind
    assert hook["clientConfig"] == {
        "service": {
            "namespace": "elb-system",
            "name": "elb-gate-webhook",
            "path": path,
            "port": 443,
        }
    }
    assert "caBundle" not in hook["clientConfig"]  # injected by an overlay or cert-manager
    # Search admission writes the admission record, never on a dry run; the Lease
    # webhooks write nothing.
    side_effects = "NoneOnDryRun" if name == "search-admission.elb-gate.io" else "None"
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["sideEffects"]) == (
        "Fail",
        5,
        side_effects,
    )
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "elb-gate.io/gated", "operator": "In", "values": ["true"]},
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "elb-system"],
            },
        ]
    }
    [rule] = hook["rules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (
        [group],
        [resource],
        operations,
    )
    assert hook["matchConditions"]


def matches(name: str, operation: str, obj: Any, old: Any, request_name: str = "x") -> bool:
    """Evaluate a webhook's matchConditions with celpy, as the apiserver would (all must hold)."""
    env = celpy.Environment()
    activation = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel({"operation": operation, "name": request_name}),
    }
    results = []
    for condition in HOOKS[name][1]["matchConditions"]:
        result = env.program(env.compile(condition["expression"])).evaluate(activation)
        assert not isinstance(result, Exception), result
        results.append(bool(result))
    return all(results)


def job(labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j"}
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("operation", "new", "old", "reaches"),
    [
        ("CREATE", {"app": "finalizer", "elb-job-id": "a"}, None, True),
        ("CREATE", {"app": "submit", "elb-job-id": "a"}, None, True),
        ("CREATE", {"app": "blast"}, None, True),
        ("CREATE", {"app": "setup", "elb-job-id": "a"}, None, True),
        ("CREATE", {"app": "setup"}, None, True),
        ("CREATE", {"app": "Finalizer", "elb-job-id": "a"}, None, True),
        ("CREATE", {"app": "BLAST"}, None, True),
        ("CREATE", {"app": "b1ast"}, None, True),
        ("CREATE", {"app": "subrnit"}, None, True),
        ("CREATE", {"app": "blaster"}, None, False),
        ("CREATE", {"app": "web"}, None, False),
        ("UPDATE", {"app": "Blast", "elb-job-id": "a"}, {"app": "Blast", "elb-job-id": "a"}, False),
        ("CREATE", {"app": "finalizer"}, None, True),
        ("CREATE", {"app": "janitor"}, None, False),
        ("CREATE", None, None, False),
        ("UPDATE", {"app": "blast", "elb-job-id": "a"}, {"app": "blast", "elb-job-id": "a"}, False),
        (
            "UPDATE",
            {"app": "blast", "elb-job-id": "a", "x": "y"},
            {"app": "blast", "elb-job-id": "a"},
            False,
        ),
        ("UPDATE", {"app": "blast", "elb-job-id": "b"}, {"app": "blast", "elb-job-id": "a"}, True),
        ("UPDATE", {"app": "blast", "elb-job-id": "a"}, {"app": "blast"}, True),
        ("UPDATE", {"app": "blast"}, {"app": "blast", "elb-job-id": "a"}, True),
        (
            "UPDATE",
            {"app": "finalizer", "elb-job-id": "a"},
            {"app": "blast", "elb-job-id": "a"},
            True,
        ),
        ("UPDATE", {"app": "blast"}, None, True),
        (
            "UPDATE",
            {"app": "janitor", "elb-job-id": "b"},
            {"app": "janitor", "elb-job-id": "a"},
            False,
        ),
        ("UPDATE", {"elb-job-id": "a"}, {"app": "blast", "elb-job-id": "a"}, False),
    ],
    ids=[
        "creating a finalizer",
        "creating a submit Job",
        "creating a blast Job without id",
        "creating a setup Job (init-ssd, init-pv) of a search",
        "creating a setup Job without id (import-queries)",
        "a capitalised finalizer is sent (refused with 422 by the handler)",
        "an upper-case app is sent",
        "digit one for l is sent",
        "rn for m is sent",
        "a longer word is not sent",
        "an ordinary Job is not sent",
        "the Job controller's updates of a near-miss Job are not sent",
        "creating a finalizer without id (refused with 422 by the handler)",
        "creating another app's Job is not sent",
        "creating an unlabelled Job is not sent",
        "the Job controller's status updates are not sent",
        "adding an unrelated label is not sent",
        "changing elb-job-id",
        "adding elb-job-id",
        "removing elb-job-id",
        "turning a Job into a finalizer",
        "adding a gated app label",
        "relabelling a Job that is not a search Job is not sent",
        "removing the app label is not sent (the Job leaves the census)",
    ],
)
def test_only_gated_job_writes_reach_the_webhook(
    operation: str, new: dict[str, str] | None, old: dict[str, str] | None, reaches: bool
) -> None:
    old_obj = None if operation == "CREATE" else job(old)
    assert matches("search-admission.elb-gate.io", operation, job(new), old_obj) is reaches


@pytest.mark.parametrize("hook", ["lease-guard.elb-gate.io", "lease-stamp.elb-gate.io"])
@pytest.mark.parametrize(
    ("lease_name", "reaches"),
    [
        ("elb-blast-submit-default", True),
        ("elb-blast-submit-team-a", True),
        ("elb-gate-controller", False),
        ("kube-scheduler", False),
        ("", False),
    ],
)
def test_only_submit_leases_reach_the_lease_webhooks(
    hook: str, lease_name: str, reaches: bool
) -> None:
    lease = {"metadata": {"name": lease_name}, "spec": {}}
    assert matches(hook, "UPDATE", lease, lease, request_name=lease_name) is reaches


def test_a_request_without_a_name_does_not_error() -> None:
    env = celpy.Environment()
    [condition] = HOOKS["lease-guard.elb-gate.io"][1]["matchConditions"]
    result = env.program(env.compile(condition["expression"])).evaluate(
        {"request": celpy.json_to_cel({"operation": "CREATE"})}
    )
    assert result is False or result == celpy.celtypes.BoolType(False)


def test_the_job_webhook_sends_near_misses_with_the_pattern_the_policy_is_tested_against() -> None:
    [condition] = HOOKS["search-admission.elb-gate.io"][1]["matchConditions"]
    assert f".matches('{NEAR_MISS_APP_PATTERN}')" in condition["expression"]
