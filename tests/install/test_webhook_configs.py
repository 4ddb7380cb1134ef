"""The webhook configurations an operator applies are exactly the ones the
webhook's integration tests register in the emulator, and cannot block anything
the cluster needs to run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.install.rendering import INSTALL_TARGETS, MANIFESTS, Obj, one

SOURCE = MANIFESTS / "base" / "admission-webhooks.yaml"
KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
CONTRACT = {
    # webhook name → (configuration kind, path, resource, operations): docs/interfaces.md
    "search-admission.elb-gate.io": (
        "ValidatingWebhookConfiguration",
        "/validate/jobs",
        "jobs",
        ["CREATE", "UPDATE"],
    ),
    "lease-stamp.elb-gate.io": (
        "MutatingWebhookConfiguration",
        "/mutate/leases",
        "leases",
        ["CREATE", "UPDATE"],
    ),
    "lease-guard.elb-gate.io": (
        "ValidatingWebhookConfiguration",
        "/validate/leases",
        "leases",
        ["CREATE", "UPDATE", "DELETE"],
    ),
}


def _hooks(objects: list[Obj]) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        hook["name"]: (obj["kind"], hook)
        for obj in objects
        if obj["kind"] in KINDS
        for hook in obj["webhooks"]
    }


def _without_ca_bundle(hook: dict[str, Any]) -> dict[str, Any]:
    client = {k: v for k, v in hook["clientConfig"].items() if k != "caBundle"}
    return {**hook, "clientConfig": client}


def _source() -> list[Obj]:
    return [d for d in yaml.safe_load_all(Path(SOURCE).read_text()) if d]


@pytest.mark.parametrize("target", ["base", *INSTALL_TARGETS])
def test_rendered_webhooks_are_exactly_those_of_admission_webhooks_yaml(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    expected = _hooks(_source())
    if target == "overlays/warn":  # warn never blocks: search admission fails open
        kind, hook = expected["search-admission.elb-gate.io"]
        expected["search-admission.elb-gate.io"] = (kind, {**hook, "failurePolicy": "Ignore"})
    got = {
        name: (kind, _without_ca_bundle(h)) for name, (kind, h) in _hooks(rendered[target]).items()
    }
    assert got == expected


@pytest.mark.parametrize("target", INSTALL_TARGETS)
def test_the_lease_guard_and_stamp_fail_closed_in_every_install_including_warn(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    hooks = _hooks(rendered[target])
    assert hooks["lease-guard.elb-gate.io"][1]["failurePolicy"] == "Fail"
    assert hooks["lease-stamp.elb-gate.io"][1]["failurePolicy"] == "Fail"


@pytest.mark.parametrize("target", INSTALL_TARGETS)
def test_both_configurations_opt_out_of_the_aks_admissions_enforcer(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    configs = [o for o in rendered[target] if o["kind"] in KINDS]
    assert len(configs) == 2
    for config in configs:
        assert config["metadata"]["annotations"]["admissions.enforcer/disabled"] == "true"


def test_the_webhooks_are_the_ones_the_contract_names() -> None:
    for name, (kind, hook) in _hooks(_source()).items():
        want_kind, want_path, resource, operations = CONTRACT[name]
        (rule,) = hook["rules"]
        assert kind == want_kind, name
        assert hook["clientConfig"]["service"] == {
            "namespace": "elb-system",
            "name": "elb-gate-webhook",
            "path": want_path,
            "port": 443,
        }
        assert rule["resources"] == [resource] and rule["operations"] == operations
    assert set(_hooks(_source())) == set(CONTRACT)


def test_the_webhooks_call_the_service_the_base_defines(rendered: dict[str, list[Obj]]) -> None:
    svc = one(rendered["base"], "Service", "elb-gate-webhook")
    ports = [p["port"] for p in svc["spec"]["ports"]]
    for _kind, hook in _hooks(rendered["base"]).values():
        ref = hook["clientConfig"]["service"]
        assert (ref["namespace"], ref["name"]) == ("elb-system", "elb-gate-webhook")
        assert ref["port"] in ports


def test_only_labelled_namespaces_and_gated_objects_can_ever_be_refused() -> None:
    # Whatever the cluster needs to start (kube-system, node Leases, other
    # workloads) lives outside the gated label or fails the matchConditions, so
    # an elb-gate outage (failurePolicy Fail) cannot block it. kube-system and
    # elb-system are excluded by name even if someone labels them.
    for name, (_kind, hook) in _hooks(_source()).items():
        assert hook["namespaceSelector"] == {
            "matchExpressions": [
                {"key": "elb-gate.io/gated", "operator": "In", "values": ["true"]},
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", "elb-system"],
                },
            ]
        }, name
        assert hook["matchConditions"], name
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] <= 5
        assert hook["admissionReviewVersions"] == ["v1"]
    lease_conditions = [
        c["expression"]
        for name, (_k, h) in _hooks(_source()).items()
        if "lease" in name
        for c in h["matchConditions"]
    ]
    assert all("elb-blast-submit-" in expr for expr in lease_conditions)
