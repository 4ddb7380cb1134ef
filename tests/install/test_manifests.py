"""Every kustomize target renders, validates against the Kubernetes OpenAPI
schemas, and carries the properties an operator relies on without reading code."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from cryptography import x509
from packaging.version import Version

from elbgate.identities import SubmitterIdentities
from elbgate.settings import Settings, describe
from tests.install import schemas
from tests.install.rendering import INSTALL_TARGETS, TARGETS, Obj, by_name_prefix, one, select

OLDEST_SUPPORTED = "1.30"
NEWEST = schemas.shipped_versions()[-1]
CRD_KINDS = {
    # kind → (apiVersion, the spec fields our own check requires). Not in the
    # Kubernetes OpenAPI schemas, so kubernetes-validate cannot judge them.
    "ServiceMonitor": ("monitoring.coreos.com/v1", {"selector", "endpoints"}),
    "PrometheusRule": ("monitoring.coreos.com/v1", {"groups"}),
    "Certificate": ("cert-manager.io/v1", {"secretName", "issuerRef"}),
    "Issuer": ("cert-manager.io/v1", set()),
}
COMPONENTS = ("webhook", "controller")


def _all(rendered: dict[str, list[Obj]]) -> list[tuple[str, Obj]]:
    return [(target, obj) for target in TARGETS for obj in rendered[target]]


def test_every_target_renders_something(rendered: dict[str, list[Obj]]) -> None:
    assert all(rendered[target] for target in TARGETS)


def test_the_schemas_used_are_1_30_and_the_newest_shipped() -> None:
    assert OLDEST_SUPPORTED in schemas.shipped_versions()
    assert Version(NEWEST) >= Version("1.32"), "kubectl here is 1.32; validate at least that"


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, NEWEST])
def test_every_builtin_object_validates_strictly_against_the_openapi_schema(
    rendered: dict[str, list[Obj]], version: str
) -> None:
    problems = []
    for target, obj in _all(rendered):
        if obj["kind"] in CRD_KINDS:
            continue
        try:
            found = schemas.errors(obj, version)
        except schemas.SchemaMissing as exc:
            found = [f"no schema: {exc}"]
        problems += [f"{target}: {obj['kind']}/{obj['metadata']['name']}: {p}" for p in found]
    assert problems == []


def test_custom_resources_are_only_the_allow_listed_kinds_and_have_their_required_fields(
    rendered: dict[str, list[Obj]],
) -> None:
    seen = set()
    for target, obj in _all(rendered):
        try:
            schemas.errors(obj, NEWEST)
            continue
        except schemas.SchemaMissing:
            pass
        assert obj["kind"] in CRD_KINDS, f"{target}: no schema check for {obj['kind']}"
        api_version, required = CRD_KINDS[obj["kind"]]
        assert obj["apiVersion"] == api_version
        assert obj["metadata"]["namespace"] == "elb-system"
        assert required <= set(obj["spec"]), f"{obj['kind']} lacks {required - set(obj['spec'])}"
        seen.add(obj["kind"])
    assert seen == set(CRD_KINDS)


def test_the_base_applies_without_prometheus_operator_or_cert_manager_crds(
    rendered: dict[str, list[Obj]],
) -> None:
    for target in ("base", "overlays/generated", "overlays/warn"):
        assert not [o for o in rendered[target] if o["kind"] in CRD_KINDS], target


# --- workloads -------------------------------------------------------------------


def _deployment(objects: list[Obj], component: str) -> Obj:
    return one(objects, "Deployment", f"elb-gate-{component}")


@pytest.mark.parametrize("component", COMPONENTS)
def test_both_deployments_run_two_hardened_replicas(
    rendered: dict[str, list[Obj]], component: str
) -> None:
    deploy = _deployment(rendered["base"], component)
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert deploy["spec"]["replicas"] == 2
    assert pod["serviceAccountName"] == f"elb-gate-{component}"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["command"] == ["python", "-m", component]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    if component == "webhook":  # two replicas on two nodes, required (test_chart.py)
        hard = [
            c for c in pod["topologySpreadConstraints"] if c["whenUnsatisfiable"] == "DoNotSchedule"
        ]
        assert hard and hard[0]["topologyKey"] == "kubernetes.io/hostname"
    else:
        assert pod["affinity"]["podAntiAffinity"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_both_deployments_probe_health_and_readiness_on_the_metrics_port(
    rendered: dict[str, list[Obj]], component: str
) -> None:
    (container,) = _deployment(rendered["base"], component)["spec"]["template"]["spec"][
        "containers"
    ]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == 9090
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


@pytest.mark.parametrize("component", COMPONENTS)
def test_both_deployments_get_pod_name_and_namespace_from_the_downward_api(
    rendered: dict[str, list[Obj]], component: str
) -> None:
    (container,) = _deployment(rendered["base"], component)["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {
        "ELB_GATE_POD_NAME": "metadata.name",
        "ELB_GATE_POD_NAMESPACE": "metadata.namespace",
    }


def test_the_webhook_mounts_its_tls_secret_where_the_settings_expect_it(
    rendered: dict[str, list[Obj]],
) -> None:
    pod = _deployment(rendered["base"], "webhook")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    defaults = Settings()
    assert mounts["tls"]["mountPath"] == "/etc/elb-gate/tls" and "subPath" not in mounts["tls"]
    assert defaults.webhook.tls_cert_file == "/etc/elb-gate/tls/tls.crt"
    assert defaults.webhook.tls_key_file == "/etc/elb-gate/tls/tls.key"
    assert volumes["tls"]["secret"]["secretName"] == "elb-gate-webhook-tls"
    assert {p["containerPort"] for p in container["ports"]} == {8443, 9090}


def test_the_webhook_rolls_one_replica_at_a_time_and_never_blocks_a_drain(
    rendered: dict[str, list[Obj]],
) -> None:
    pdb = one(rendered["base"], "PodDisruptionBudget", "elb-gate-webhook")
    strategy = _deployment(rendered["base"], "webhook")["spec"]["strategy"]
    assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1} and "minAvailable" not in pdb["spec"]
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0


def test_the_webhook_service_maps_443_to_the_admission_port(
    rendered: dict[str, list[Obj]],
) -> None:
    svc = one(rendered["base"], "Service", "elb-gate-webhook")
    pod_labels = _deployment(rendered["base"], "webhook")["spec"]["template"]["metadata"]["labels"]
    (port,) = svc["spec"]["ports"]
    assert svc["metadata"]["namespace"] == "elb-system"
    assert (port["port"], port["targetPort"]) == (443, "https")
    assert svc["spec"]["selector"].items() <= pod_labels.items()


def test_the_namespace_enforces_restricted_pod_security(rendered: dict[str, list[Obj]]) -> None:
    labels = one(rendered["base"], "Namespace", "elb-system")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert "elb-gate.io/gated" not in labels


def test_only_prometheus_may_reach_the_metrics_port_and_anyone_the_admission_port(
    rendered: dict[str, list[Obj]],
) -> None:
    policies = {p["metadata"]["name"]: p for p in select(rendered["base"], "NetworkPolicy")}
    webhook_rules = policies["elb-gate-webhook"]["spec"]["ingress"]
    controller_rules = policies["elb-gate-controller"]["spec"]["ingress"]
    admission = [r for r in webhook_rules if r["ports"][0]["port"] == 8443]
    metrics = [r for r in webhook_rules + controller_rules if r["ports"][0]["port"] == 9090]
    assert admission == [{"ports": [{"port": 8443, "protocol": "TCP"}]}]
    assert len(metrics) == 2
    for rule in metrics:
        (source,) = rule["from"]
        (expr,) = source["namespaceSelector"]["matchExpressions"]
        assert expr["key"] == "kubernetes.io/metadata.name" and expr["values"] == ["monitoring"]


# --- configuration -----------------------------------------------------------------


def _settings_env(objects: list[Obj]) -> dict[str, str]:
    return by_name_prefix(objects, "ConfigMap", "elb-gate-settings-")["data"]


@pytest.mark.parametrize("target", INSTALL_TARGETS)
def test_the_settings_configmap_holds_only_known_keys_and_starts_cleanly(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    env = _settings_env(rendered[target])
    known = {name for name, _default, _doc in describe()}
    assert set(env) <= known, set(env) - known
    settings = Settings.from_env(env)  # raises SettingsError on an incoherent set
    assert settings.webhook.submitter_identities_file == "/etc/elb-gate/identities/submitters.yaml"


@pytest.mark.parametrize(
    ("target", "mode"),
    [("overlays/generated", "deny"), ("overlays/cert-manager", "deny"), ("overlays/warn", "warn")],
)
def test_enforcement_is_deny_except_in_the_warn_overlay(
    rendered: dict[str, list[Obj]], target: str, mode: str
) -> None:
    assert Settings.from_env(_settings_env(rendered[target])).webhook.enforcement == mode


@pytest.mark.parametrize("component", COMPONENTS)
def test_both_deployments_read_the_generated_settings_and_identity_configmaps(
    rendered: dict[str, list[Obj]], component: str
) -> None:
    objects = rendered["overlays/warn"]
    pod = _deployment(objects, component)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    settings_name = by_name_prefix(objects, "ConfigMap", "elb-gate-settings-")["metadata"]["name"]
    ids = by_name_prefix(objects, "ConfigMap", "elb-gate-submitters-")
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert container["envFrom"] == [{"configMapRef": {"name": settings_name}}]
    assert volumes["submitters"]["configMap"]["name"] == ids["metadata"]["name"]
    assert mounts["submitters"] == "/etc/elb-gate/identities"


def test_the_identity_file_parses_as_submitter_identities(rendered: dict[str, list[Obj]]) -> None:
    data = by_name_prefix(rendered["base"], "ConfigMap", "elb-gate-submitters-")["data"]
    assert SubmitterIdentities.parse(yaml.safe_load(data["submitters.yaml"])).submitters == ()


@pytest.mark.parametrize("target", INSTALL_TARGETS)
def test_gated_namespace_bindings_match_the_gated_namespaces_setting(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    objects = rendered[target]
    gated = set(Settings.from_env(_settings_env(objects)).controller.namespaces)
    for component in COMPONENTS:
        bound = {
            rb["metadata"]["namespace"]
            for rb in select(objects, "RoleBinding", f"elb-gate-{component}")
        }
        assert bound == gated, component


# --- certificates in the overlays ---------------------------------------------------


def _webhook_configs(objects: list[Obj]) -> list[Obj]:
    kinds = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    return [o for o in objects if o["kind"] in kinds]


@pytest.mark.parametrize("target", ["overlays/generated", "overlays/warn"])
def test_the_generated_ca_bundle_verifies_the_secret_on_every_webhook(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    objects = rendered[target]
    secret = one(objects, "Secret", "elb-gate-webhook-tls")
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    hooks = [h for c in _webhook_configs(objects) for h in c["webhooks"]]
    assert len(hooks) == 3
    for hook in hooks:
        (ca, *_older) = x509.load_pem_x509_certificates(
            base64.b64decode(hook["clientConfig"]["caBundle"])
        )
        leaf.verify_directly_issued_by(ca)


def test_cert_manager_injects_the_ca_into_both_configurations_from_the_serving_certificate(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["overlays/cert-manager"]
    cert = one(objects, "Certificate", "elb-gate-webhook-tls")
    configs = _webhook_configs(objects)
    assert cert["spec"]["secretName"] == "elb-gate-webhook-tls"
    assert cert["spec"]["dnsNames"] == [
        "elb-gate-webhook",
        "elb-gate-webhook.elb-system",
        "elb-gate-webhook.elb-system.svc",
        "elb-gate-webhook.elb-system.svc.cluster.local",
    ]
    assert len(configs) == 2
    for config in configs:
        annotations: dict[str, Any] = config["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "elb-system/elb-gate-webhook-tls"
    assert not select(objects, "Secret")


def test_the_schema_check_catches_a_misspelt_field_and_a_wrong_type() -> None:
    broken = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "replicas": "two",
            "selector": {},
            "template": {"spec": {"containers": [{"name": "a", "imagee": "x"}]}},
        },
    }
    found = schemas.errors(broken, OLDEST_SUPPORTED)
    assert any("replicas" in p for p in found) and any("imagee" in p for p in found)


@pytest.mark.parametrize("component", COMPONENTS)
def test_both_deployments_have_a_small_writable_tmp_under_the_read_only_root(
    rendered: dict[str, list[Obj]], component: str
) -> None:
    # The webhook's certificate reload hands ssl a private copy via tempfile.
    pod = _deployment(rendered["base"], component)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/tmp"]]["emptyDir"]["sizeLimit"]
