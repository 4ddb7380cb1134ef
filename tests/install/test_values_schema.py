"""charts/elb-gate/values.schema.json: a mistyped value fails ``helm template``
and ``helm lint`` (and so ``helm install``/``upgrade``) naming it, instead of
rendering something else — an unknown key, a number out of the range the API
server or elb-gate accepts, a misspelt choice, a value of the wrong type."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from elbgate.settings import describe
from manifests.generate import CHART
from tests.install.chart import NAMESPACE, ChartError, helm, render
from tests.install.rendering import one

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())

FREE_FORM = {
    "commonLabels",
    "webhook.nodeSelector",
    "webhook.affinity",
    "webhook.podAnnotations",
    "webhook.resources.requests",
    "webhook.resources.limits",
    "controller.nodeSelector",
    "controller.affinity",
    "controller.podAnnotations",
    "controller.resources.requests",
    "controller.resources.limits",
    "settings.extra",
    "certificates.certManager.issuerRef",
    "monitoring.scrape.labels",
    "monitoring.prometheusRule.labels",
    "monitoring.dashboard.labels",
    "monitoring.dashboard.annotations",
}
"""Maps whose keys are not the chart's: labels, annotations, Kubernetes types the
API server validates, and settings.extra (its keys are checked against the
setting names instead: test below)."""


def _mappings(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            yield dotted
            yield from _mappings(value, f"{dotted}.")


OWNED_LEVELS = ["", *[m for m in _mappings(DEFAULTS) if m not in FREE_FORM]]


def _lint(sets: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    argv = [str(helm()), "lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    for key, value in sets.items():
        argv += ["--set-json", f"{key}={json.dumps(value)}"]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def _refused(sets: dict[str, Any], says: str) -> None:
    """Both ``helm template`` and ``helm lint`` refuse ``sets``, naming the problem."""
    with pytest.raises(ChartError) as refused:
        render(sets)
    assert "don't meet the specifications of the schema" in str(refused.value)
    assert says in str(refused.value), str(refused.value)
    linted = _lint(sets)
    assert linted.returncode != 0 and says in linted.stdout + linted.stderr


# --- unknown keys -----------------------------------------------------------------------


@pytest.mark.parametrize("level", OWNED_LEVELS, ids=lambda level: level or "top")
def test_an_unknown_key_is_refused_at_every_level_the_chart_owns(level: str) -> None:
    key = f"{level}.enforcment" if level else "enforcment"
    _refused({key: "warn"}, "additional properties 'enforcment' not allowed")


def test_the_typo_of_the_issue_no_longer_installs_enforce_mode() -> None:
    _refused({"enforcment": "warn"}, "'enforcment' not allowed")


def test_an_unknown_setting_in_extra_is_refused() -> None:
    _refused({"settings.extra": {"ELB_GATE_RECLAIM_GRACE": "45"}}, "'ELB_GATE_RECLAIM_GRACE'")


def test_settings_extra_takes_exactly_the_settings_the_chart_does_not_set_itself() -> None:
    allowed = set(SCHEMA["properties"]["settings"]["properties"]["extra"]["propertyNames"]["enum"])
    client_auth = {
        "mode": "verify",
        "caBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        "names": ["kube-apiserver-webhook-client"],
    }
    # The managed certificates' settings (the default) and the mounted files' (the
    # other sources): the chart sets each in one mode, so neither is extra.
    managed = render({"webhook.clientAuth": client_auth})
    mounted = render({"webhook.clientAuth": client_auth, "certificates.source": "generated"})
    rendered = {
        key
        for objects in (managed, mounted)
        for key in one(objects, "ConfigMap", "elb-gate-settings")["data"]
    }
    pods = [
        one(objects, "Deployment", f"elb-gate-{c}")["spec"]["template"]["spec"]
        for objects in (managed, mounted)
        for c in ("webhook", "controller")
    ]
    containers = [c for pod in pods for c in pod["containers"]]
    env = {e["name"] for c in containers for e in c.get("env", [])}
    defaults = {name: default for name, default, _ in describe()}
    ports = {str(p["containerPort"]) for c in containers for p in c["ports"]}
    mounts = {m["mountPath"] for c in containers for m in c["volumeMounts"]}
    pinned = {
        name
        for name, default in defaults.items()
        if (name.endswith("_PORT_NUMBER") and default in ports)
        or (name.endswith("_FILE") and str(Path(default).parent) in mounts)
    }
    assert {"ELB_GATE_WEBHOOK_PORT_NUMBER", "ELB_GATE_TLS_CERT_FILE"} <= pinned
    assert allowed == set(defaults) - rendered - env - pinned
    assert "ELB_GATE_RECLAIM_GRACE_SECONDS" in allowed and "ELB_GATE_ENFORCEMENT" not in allowed


def test_every_allowed_extra_setting_renders() -> None:
    names = SCHEMA["properties"]["settings"]["properties"]["extra"]["propertyNames"]["enum"]
    defaults = {name: default for name, default, _ in describe()}
    extra = {name: defaults[name] for name in names}
    data = one(render({"settings.extra": extra}), "ConfigMap", "elb-gate-settings")["data"]
    assert {name: data[name] for name in names} == extra


# --- out of range -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("webhook.timeoutSeconds", 45, "maximum: got 45, want 30"),
        ("webhook.timeoutSeconds", 31, "maximum: got 31, want 30"),
        ("webhook.timeoutSeconds", 0, "minimum: got 0, want 1"),
        ("webhook.replicas", 0, "minimum: got 0, want 1"),
        ("controller.replicas", 0, "minimum: got 0, want 1"),
        ("settings.maxRunConcurrency", 0, "minimum: got 0, want 1"),
        ("orphanDeleteAfterSeconds", -1, "minimum: got -1, want 0"),
        ("gatedNamespaces", [], "minItems"),
        ("gatedNamespaces", ["Blast_1"], "/gatedNamespaces/0"),
        ("image.digest", "sha256:abc", "/image/digest"),
    ],
)
def test_a_value_out_of_range_is_refused(key: str, value: Any, says: str) -> None:
    _refused({key: value}, says)


@pytest.mark.parametrize("seconds", [1, 30])
def test_the_timeout_bounds_the_api_server_allows_render(seconds: int) -> None:
    objects = render({"webhook.timeoutSeconds": seconds})
    hooks = one(objects, "ValidatingWebhookConfiguration", "elb-gate")["webhooks"]
    assert {h["timeoutSeconds"] for h in hooks} == {seconds}


# --- mistyped choices -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("enforcement", "audit"),
        ("enforcement", "Deny"),
        ("orphanPolicy", "ignore"),
        ("gatedNamespaceSelection", "all"),
        ("systemPool", "yes"),
        ("certificates.source", "vault"),
        ("monitoring.flavour", "datadog"),
        ("monitoring.scrape.kind", "Probe"),
        ("settings.logFormat", "xml"),
        ("webhook.clientAuth.mode", "on"),
        ("image.pullPolicy", "always"),
    ],
)
def test_a_misspelt_choice_is_refused(key: str, value: str) -> None:
    _refused({key: value}, f"at '/{key.replace('.', '/')}': value must be one of")


# --- wrong types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("webhook.replicas", "two", "got string, want integer"),
        ("webhook.timeoutSeconds", 2.5, "got number, want integer"),
        ("gatedNamespaces", "default", "got string, want array"),
        ("networkPolicy.enabled", "yes", "got string, want boolean"),
        ("monitoring.prometheusRule.enabled", "true", "value must be one of true, false, 'auto'"),
        ("webhook", [], "got array, want object"),
        ("commonLabels", {"team": 7}, "got number, want string"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(key: str, value: Any, says: str) -> None:
    _refused({key: value}, says)


# --- what stays accepted ----------------------------------------------------------------


def test_the_defaults_and_the_kustomize_profile_meet_the_schema() -> None:
    assert _lint({}).returncode == 0
    assert render(kustomize_profile=True)


def test_a_bare_yaml_off_for_the_client_auth_mode_is_still_off() -> None:
    settings = one(render({"webhook.clientAuth.mode": False}), "ConfigMap", "elb-gate-settings")
    assert "ELB_GATE_CLIENT_AUTH" not in settings["data"]
