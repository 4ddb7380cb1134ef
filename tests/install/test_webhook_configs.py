"""The webhook configurations an operator applies are exactly the ones the
integration tests register with the real API server, and cannot block anything
the cluster needs to run."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.controlplane import ControlPlane
from testbed.webhook_process import MANIFEST, WebhookProcess, shipped_configurations
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
        # Search admission writes the admission record (never on a dry run).
        side_effects = "NoneOnDryRun" if name == "search-admission.elb-gate.io" else "None"
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == side_effects
        assert hook["timeoutSeconds"] <= 5
        assert hook["admissionReviewVersions"] == ["v1"]
    lease_conditions = [
        c["expression"]
        for name, (_k, h) in _hooks(_source()).items()
        if "lease" in name
        for c in h["matchConditions"]
    ]
    assert all("elb-blast-submit-" in expr for expr in lease_conditions)


# -- what the API server stores when the tests register them ----------------------------

SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")
"""What the API server writes into every object's metadata."""
SERVER_DEFAULTS: dict[str, Any] = {"objectSelector": {}}
"""What the API server fills into a webhook the manifest leaves it out of (the
same meaning as absent: every object matches)."""


@pytest.fixture(scope="module")
def registered(control_plane: ControlPlane) -> Iterator[tuple[WebhookProcess, list[Obj]]]:
    """A webhook process as the integration tests run it, and what the API server
    stores for the configurations it registered."""
    with WebhookProcess(control_plane, pod="elb-gate-webhook-configs") as hook:
        yield hook, hook.registered()


def test_the_testbed_registers_the_shipped_manifest() -> None:
    assert Path(SOURCE).resolve() == MANIFEST.resolve()


def test_registered_configurations_differ_from_the_shipped_ones_only_by_url_and_ca_bundle(
    registered: tuple[WebhookProcess, list[Obj]],
) -> None:
    hook, stored_docs = registered
    shipped = shipped_configurations()
    assert [(d["kind"], d["metadata"]["name"]) for d in stored_docs] == [
        (d["kind"], d["metadata"]["name"]) for d in shipped
    ]
    for ship, stored in zip(shipped, stored_docs, strict=True):
        got = copy.deepcopy(stored)
        for key in SERVER_METADATA:
            got["metadata"].pop(key, None)
        assert [h["name"] for h in got["webhooks"]] == [h["name"] for h in ship["webhooks"]]
        for shipped_hook, got_hook in zip(ship["webhooks"], got["webhooks"], strict=True):
            service = shipped_hook["clientConfig"]["service"]
            # The one transformation: the Service reference becomes a URL to the
            # process on 127.0.0.1, with the CA that signed its certificate.
            assert got_hook["clientConfig"] == {
                "url": f"https://127.0.0.1:{hook.port}{service['path']}",
                "caBundle": hook.certificate.ca_bundle,
            }
            got_hook["clientConfig"] = shipped_hook["clientConfig"]
            for key, default in SERVER_DEFAULTS.items():
                if key not in shipped_hook and got_hook.get(key) == default:
                    del got_hook[key]
        assert got == ship
