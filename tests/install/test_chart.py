"""The Helm chart: lints, renders valid Kubernetes 1.30+ objects for every
supported combination of values, and each value does what values.yaml says."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import pytest
import yaml
from cryptography import x509

from manifests.generate import CHART
from tests.install import schemas
from tests.install.chart import NAMESPACE, ChartError, helm, render
from tests.install.rendering import Obj, one, select

OLDEST_SUPPORTED = "1.30"
NEWEST = schemas.shipped_versions()[-1]
CRD_API_GROUPS = {"monitoring.coreos.com", "azmonitoring.coreos.com", "cert-manager.io"}
HOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
RUNBOOK = "https://docs.example.test/elb-gate/runbook.md"

COMBINATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "warn": {"enforcement": "warn"},
    "cert-manager": {"certificates.source": "cert-manager"},
    "cert-manager with a cluster issuer": {
        "certificates.source": "cert-manager",
        "certificates.certManager.issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"},
    },
    "provided certificate": {
        "certificates.source": "provided",
        "certificates.provided.caBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    },
    "label selection, three namespaces": {
        "gatedNamespaceSelection": "label",
        "gatedNamespaces": ["default", "blast", "team-b"],
    },
    "prometheus operator, everything on": {
        "monitoring.scrape.enabled": True,
        "monitoring.prometheusRule.enabled": True,
        "monitoring.prometheusRule.runbookBaseUrl": RUNBOOK,
        "monitoring.dashboard.enabled": True,
    },
    "azure managed prometheus, pod monitors": {
        "monitoring.flavour": "azure-managed-prometheus",
        "monitoring.scrape.enabled": True,
        "monitoring.scrape.kind": "PodMonitor",
        "monitoring.dashboard.enabled": True,
    },
    "own namespace, no network policy, no critical class": {
        "namespace.create": True,
        "networkPolicy.enabled": False,
        "webhook.priorityClassName": "",
    },
    "scheduling and image overrides": {
        "image.registry": "myacr.azurecr.io",
        "image.digest": "sha256:" + "a" * 64,
        "webhook.replicas": 3,
        "webhook.tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "webhook.affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "agentpool", "operator": "In", "values": ["system"]}
                            ]
                        }
                    ]
                }
            }
        },
        "controller.priorityClassName": "system-cluster-critical",
        "submitters": [{"name": "dashboard", "holderPrefix": "dashboard-", "users": ["dash"]}],
        "settings.extra": {"ELB_GATE_RECLAIM_GRACE_SECONDS": 60},
    },
    "security: submitter RBAC and policy, client certificates, admission port peers": {
        "submitters": [
            {
                "name": "dashboard",
                "holderPrefix": "dashboard-",
                "users": ["dash"],
                "groups": ["web"],
            }
        ],
        "submitterAccess.rbac": True,
        "submitterAccess.admissionPolicy": True,
        "webhook.clientAuth": {
            "mode": "require",
            "caBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "names": ["kube-apiserver-webhook-client"],
        },
        "networkPolicy.admissionFrom": [{"ipBlock": {"cidr": "10.1.2.0/28"}}],
    },
}


def _hooks(objects: list[Obj]) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for o in objects if o["kind"] in HOOK_KINDS for h in o["webhooks"]}


def _pod(objects: list[Obj], component: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment", f"elb-gate-{component}")["spec"]["template"][
        "spec"
    ]
    return spec


# --- lint and schemas ------------------------------------------------------------------


def test_helm_lint_is_clean_in_strict_mode() -> None:
    proc = subprocess.run(
        [str(helm()), "lint", "--strict", str(CHART), "--namespace", NAMESPACE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_chart_yaml_names_no_address_it_cannot_vouch_for() -> None:
    """``home``/``sources`` once named a repository address that does not exist (Artifact
    Hub and ``helm show chart`` print them as the chart's home). The chart names none
    until the project has a published one; its docs travel with it."""
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert "home" not in meta and "sources" not in meta, meta
    assert "github.com/elb-gate" not in (CHART / "Chart.yaml").read_text()


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, NEWEST])
@pytest.mark.parametrize("case", sorted(COMBINATIONS))
def test_every_combination_renders_objects_valid_for_kubernetes(case: str, version: str) -> None:
    objects = render(COMBINATIONS[case])
    problems = []
    for obj in objects:
        if obj["apiVersion"].split("/")[0] in CRD_API_GROUPS:
            continue
        try:
            found = schemas.errors(obj, version)
        except schemas.SchemaMissing as exc:
            found = [f"no schema: {exc}"]
        problems += [f"{obj['kind']}/{obj['metadata']['name']}: {p}" for p in found]
    assert problems == []
    assert {"Deployment", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} <= {
        o["kind"] for o in objects
    }


def test_the_values_schema_in_values_yaml_comments_matches_the_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["gatedNamespaces"] == ["default"]
    assert values["enforcement"] == "deny" and values["orphanPolicy"] == "warn"
    assert values["certificates"]["source"] == "managed"
    assert values["webhook"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert values["controller"]["nodeSelector"] == {"kubernetes.io/os": "linux"}


# --- one list of gated namespaces -------------------------------------------------------


def test_one_list_makes_the_selector_the_rolebindings_and_the_setting() -> None:
    objects = render({"gatedNamespaces": ["default", "blast"]})
    settings = one(objects, "ConfigMap", "elb-gate-settings")["data"]
    for hook in _hooks(objects).values():
        expressions = hook["namespaceSelector"]["matchExpressions"]
        assert {
            "key": "kubernetes.io/metadata.name",
            "operator": "In",
            "values": ["default", "blast"],
        } in expressions
        assert {"key": "elb-gate.io/gated", "operator": "NotIn", "values": ["false"]} in expressions
    for component in ("webhook", "controller"):
        bound = {
            rb["metadata"]["namespace"]
            for rb in select(objects, "RoleBinding", f"elb-gate-{component}")
        }
        assert bound == {"default", "blast"}
    assert settings["ELB_GATE_NAMESPACES"] == "default,blast"


@pytest.mark.parametrize("forbidden", ["kube-system", NAMESPACE])
def test_kube_system_and_the_own_namespace_can_never_be_gated(forbidden: str) -> None:
    with pytest.raises(ChartError, match=f'gatedNamespaces: "{forbidden}" cannot be gated'):
        render({"gatedNamespaces": ["default", forbidden]})


@pytest.mark.parametrize("selection", ["list", "label"])
def test_every_selector_excludes_kube_system_and_the_own_namespace(selection: str) -> None:
    objects = render({"gatedNamespaceSelection": selection}, namespace="gatekeeping")
    for name, hook in _hooks(objects).items():
        exclusion = {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "gatekeeping"],
        }
        assert exclusion in hook["namespaceSelector"]["matchExpressions"], name


# --- warn never blocks ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("enforcement", "search", "settings_mode"),
    [("deny", "Fail", "deny"), ("warn", "Ignore", "warn")],
)
def test_warn_mode_fails_open_on_search_admission_only(
    enforcement: str, search: str, settings_mode: str
) -> None:
    objects = render({"enforcement": enforcement})
    hooks = _hooks(objects)
    assert hooks["search-admission.elb-gate.io"]["failurePolicy"] == search
    assert hooks["lease-guard.elb-gate.io"]["failurePolicy"] == "Fail"
    assert hooks["lease-stamp.elb-gate.io"]["failurePolicy"] == "Fail"
    assert (
        one(objects, "ConfigMap", "elb-gate-settings")["data"]["ELB_GATE_ENFORCEMENT"]
        == settings_mode
    )


# --- AKS fit ----------------------------------------------------------------------------


def test_both_configurations_opt_out_of_the_aks_admissions_enforcer() -> None:
    for config in (o for o in render() if o["kind"] in HOOK_KINDS):
        assert config["metadata"]["annotations"]["admissions.enforcer/disabled"] == "true"


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_both_components_run_on_linux_nodes(component: str) -> None:
    assert _pod(render(), component)["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_the_webhook_is_cluster_critical_with_the_quota_that_admits_it() -> None:
    objects = render()
    quota = one(objects, "ResourceQuota", "elb-gate-critical-pods")
    (scope,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert _pod(objects, "webhook")["priorityClassName"] == "system-cluster-critical"
    assert "priorityClassName" not in _pod(objects, "controller")
    assert scope == {
        "scopeName": "PriorityClass",
        "operator": "In",
        "values": ["system-cluster-critical"],
    }
    assert quota["metadata"]["namespace"] == NAMESPACE
    assert quota["spec"]["hard"]["pods"] == "3", "two replicas and the one a rollout surges"


def test_the_quota_grows_with_the_replicas_that_use_a_critical_class() -> None:
    objects = render(COMBINATIONS["scheduling and image overrides"])
    assert one(objects, "ResourceQuota", "elb-gate-critical-pods")["spec"]["hard"]["pods"] == "7"
    assert not select(render({"webhook.priorityClassName": ""}), "ResourceQuota")


def test_the_webhook_replicas_must_spread_across_nodes_and_a_rollout_still_fits_two_nodes() -> None:
    objects = render()
    deploy = one(objects, "Deployment", "elb-gate-webhook")
    pod = deploy["spec"]["template"]["spec"]
    required = [
        c for c in pod["topologySpreadConstraints"] if c["whenUnsatisfiable"] == "DoNotSchedule"
    ]
    (node,) = required
    assert node["topologyKey"] == "kubernetes.io/hostname"
    assert (node["maxSkew"], node["minDomains"]) == (1, 2)
    assert (
        node["labelSelector"]["matchLabels"].items()
        <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )
    # Each revision is spread on its own, so the surge pod of a rollout can share a
    # node with an old pod on a two-node pool, and the new pods still end apart.
    assert node["matchLabelKeys"] == ["pod-template-hash"]
    assert deploy["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_user_scheduling_values_reach_the_pods() -> None:
    case = COMBINATIONS["scheduling and image overrides"]
    pod = _pod(render(case), "webhook")
    assert pod["tolerations"] == case["webhook.tolerations"]
    assert pod["affinity"] == case["webhook.affinity"]
    assert _pod(render(case), "controller")["priorityClassName"] == "system-cluster-critical"


@pytest.mark.parametrize(
    ("sets", "image"),
    [
        ({}, "elb-gate:0.1.0"),
        ({"image.registry": "myacr.azurecr.io"}, "myacr.azurecr.io/elb-gate:0.1.0"),
        (
            {"image.registry": "myacr.azurecr.io/", "image.tag": "0.2.0"},
            "myacr.azurecr.io/elb-gate:0.2.0",
        ),
        (
            {
                "image.registry": "myacr.azurecr.io",
                "image.repository": "blast/elb-gate",
                "image.digest": "sha256:" + "b" * 64,
            },
            "myacr.azurecr.io/blast/elb-gate@sha256:" + "b" * 64,
        ),
    ],
)
def test_the_image_reference_is_made_of_registry_repository_and_tag_or_digest(
    sets: dict[str, Any], image: str
) -> None:
    objects = render(sets)
    for component in ("webhook", "controller"):
        (container,) = _pod(objects, component)["containers"]
        assert container["image"] == image


# --- certificates -----------------------------------------------------------------------


def test_managed_certificates_render_the_same_every_time_with_nothing_secret() -> None:
    """The default source: no key, no certificate, no caBundle in what Helm renders, so
    two renders (Argo CD syncs, `helm template | kubectl diff`) are byte-equal."""
    from tests.install.chart import template_argv

    runs = [
        subprocess.run(template_argv({}), capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    objects = render({})
    assert not select(objects, "Secret")
    for hook in _hooks(objects).values():
        assert "caBundle" not in hook["clientConfig"]
    pod = _pod(objects, "webhook")
    assert "tls" not in {v["name"] for v in pod["volumes"]}
    settings = one(objects, "ConfigMap", "elb-gate-settings")["data"]
    assert settings["ELB_GATE_CERTIFICATES"] == "managed"
    assert settings["ELB_GATE_TLS_SECRET"] == "elb-gate-webhook-tls"
    # The generated source makes a new CA on every render without a cluster to look in.
    generated = [
        subprocess.run(
            template_argv({"certificates.source": "generated"}),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for _ in range(2)
    ]
    assert generated[0] != generated[1]


def test_generated_certificates_verify_against_the_ca_bundle_for_the_release_namespace() -> None:
    objects = render({"certificates.source": "generated"}, namespace="gatekeeping")
    secret = one(objects, "Secret", "elb-gate-webhook-tls")
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "elb-gate-webhook.gatekeeping.svc" in names.get_values_for_type(x509.DNSName)
    hooks = _hooks(objects).values()
    assert len(hooks) == 3
    for hook in hooks:
        ca = x509.load_pem_x509_certificate(base64.b64decode(hook["clientConfig"]["caBundle"]))
        leaf.verify_directly_issued_by(ca)
        assert hook["clientConfig"]["service"]["namespace"] == "gatekeeping"


def test_cert_manager_issues_the_secret_and_injects_the_ca() -> None:
    objects = render({"certificates.source": "cert-manager"})
    cert = one(objects, "Certificate", "elb-gate-webhook-tls")
    assert cert["spec"]["secretName"] == "elb-gate-webhook-tls"
    assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": "elb-gate-ca"}
    assert not select(objects, "Secret")
    for config in (o for o in objects if o["kind"] in HOOK_KINDS):
        assert (
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            == "elb-system/elb-gate-webhook-tls"
        )
        assert all("caBundle" not in h["clientConfig"] for h in config["webhooks"])


def test_cert_manager_with_your_issuer_makes_no_private_ca() -> None:
    objects = render(COMBINATIONS["cert-manager with a cluster issuer"])
    assert one(objects, "Certificate", "elb-gate-webhook-tls")["spec"]["issuerRef"] == {
        "kind": "ClusterIssuer",
        "name": "corp-ca",
    }
    assert not select(objects, "Issuer")


def test_a_provided_ca_is_the_bundle_and_no_secret_is_rendered() -> None:
    case = COMBINATIONS["provided certificate"]
    objects = render(case)
    assert not select(objects, "Secret")
    for hook in _hooks(objects).values():
        assert (
            base64.b64decode(hook["clientConfig"]["caBundle"]).decode()
            == case["certificates.provided.caBundle"]
        )


# --- configuration ----------------------------------------------------------------------


def test_settings_submitters_and_rollout_on_change() -> None:
    case = COMBINATIONS["scheduling and image overrides"]
    objects = render(case)
    data = one(objects, "ConfigMap", "elb-gate-settings")["data"]
    identities = yaml.safe_load(
        one(objects, "ConfigMap", "elb-gate-submitters")["data"]["submitters.yaml"]
    )
    assert data["ELB_GATE_RECLAIM_GRACE_SECONDS"] == "60"
    assert (
        data["ELB_GATE_CONTROLLER_USERS"] == "system:serviceaccount:elb-system:elb-gate-controller"
    )
    assert identities == {"submitters": case["submitters"]}
    before = one(render(), "Deployment", "elb-gate-webhook")["spec"]["template"]["metadata"][
        "annotations"
    ]
    after = one(objects, "Deployment", "elb-gate-webhook")["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert before["checksum/settings"] != after["checksum/settings"]
    assert before["checksum/submitters"] != after["checksum/submitters"]


# --- monitoring -------------------------------------------------------------------------


def test_prometheus_operator_flavour_scrapes_through_the_services_and_links_the_runbook() -> None:
    objects = render(COMBINATIONS["prometheus operator, everything on"])
    monitor = one(objects, "ServiceMonitor", "elb-gate")
    rule = one(objects, "PrometheusRule", "elb-gate")
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    assert {a["annotations"]["runbook_url"] for a in alerts} == {
        f"{RUNBOOK}#{a['alert'].lower()}" for a in alerts
    }
    assert {"ElbGateAdmissionLatencyHigh", "ElbGateWebhookHADegraded"} <= {
        a["alert"] for a in alerts
    }


def test_without_a_runbook_base_url_each_alert_names_its_section_of_the_shipped_runbook() -> None:
    rule = one(render({"monitoring.prometheusRule.enabled": True}), "PrometheusRule", "elb-gate")
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and [a["annotations"].get("runbook_url") for a in alerts] == [None] * len(alerts)
    assert {a["annotations"]["runbook"] for a in alerts} == {
        f"docs/runbook.md#{a['alert'].lower()}" for a in alerts
    }
    assert (CHART.parents[1] / "docs" / "runbook.md").is_file()


def test_azure_flavour_uses_the_azmonitoring_group_keeps_the_job_names_and_admits_kube_system() -> (
    None
):
    objects = render(COMBINATIONS["azure managed prometheus, pod monitors"])
    monitors = select(objects, "PodMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"elb-gate-webhook", "elb-gate-controller"}
    for monitor in monitors:
        component = monitor["metadata"]["name"].removeprefix("elb-gate-")
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert monitor["apiVersion"] == "azmonitoring.coreos.com/v1"
        assert monitor["spec"]["labelLimit"] == 63
        assert endpoint["relabelings"] == [
            {"targetLabel": "job", "replacement": f"elb-gate-{component}-metrics"}
        ]
    for policy in select(objects, "NetworkPolicy"):
        metrics = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 9090]
        (expression,) = metrics[0]["from"][0]["namespaceSelector"]["matchExpressions"]
        assert expression["values"] == ["monitoring", "kube-system"]


def test_the_dashboard_configmap_holds_the_charts_dashboard() -> None:
    objects = render(
        {"monitoring.dashboard.enabled": True, "monitoring.dashboard.namespace": "grafana"}
    )
    config = one(objects, "ConfigMap", "elb-gate-dashboard")
    assert config["metadata"]["namespace"] == "grafana"
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config["data"]["elb-gate.json"]) == json.loads(
        (CHART / "dashboards" / "elb-gate.json").read_text()
    )


def test_monitoring_objects_are_opt_in() -> None:
    kinds = {o["kind"] for o in render()}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert not select(render(), "ConfigMap", "elb-gate-dashboard")


def test_the_liveness_alert_follows_the_resync_period() -> None:
    objects = render(
        {**COMBINATIONS["prometheus operator, everything on"], "settings.resyncSeconds": 20}
    )
    rule = one(objects, "PrometheusRule", "elb-gate")
    (stale,) = [
        r
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if r.get("alert") == "ElbGateLivenessStale"
    ]
    assert stale["expr"].strip().endswith("> 60")
    assert one(objects, "ConfigMap", "elb-gate-settings")["data"]["ELB_GATE_RESYNC_SECONDS"] == "20"


def test_alerts_and_scraping_ship_on_wherever_the_cluster_can_read_them() -> None:
    """monitoring.*.enabled default auto: on when the cluster serves the kinds (helm
    install sees its APIs; here --api-versions stands in), absent from a plain helm
    template (so its output stays the same), the certificate-expiry alert included."""
    from tests.install.chart import helm

    def kinds(*api_versions: str, flavour: str = "prometheus-operator") -> dict[str, Any]:
        argv = [str(helm()), "template", "elb-gate", str(CHART), "-n", "elb-system"]
        argv += ["--set", f"monitoring.flavour={flavour}"]
        for api in api_versions:
            argv += ["--api-versions", api]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(out) if d}

    plain = kinds()
    assert not [k for k in plain if k.split("/")[0] in ("PrometheusRule", "ServiceMonitor")]
    served = kinds(
        "monitoring.coreos.com/v1/PrometheusRule", "monitoring.coreos.com/v1/ServiceMonitor"
    )
    rule = served["PrometheusRule/elb-gate"]
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "ElbGateServingCertificateExpiringSoon" in alerts
    assert "ServiceMonitor/elb-gate-webhook" in served or any(
        k.startswith("ServiceMonitor/") for k in served
    )
    azure = kinds("azmonitoring.coreos.com/v1/ServiceMonitor", flavour="azure-managed-prometheus")
    assert "ConfigMap/elb-gate-prometheus-rule-groups" in azure
    assert not [k for k in azure if k.startswith("PrometheusRule/")]
