"""Azure Managed Prometheus: the flavour renders nothing of the Prometheus
Operator's group (an AKS cluster with only the metrics add-on has no
monitoring.coreos.com kinds, so one would fail the install or upgrade), and the
alerts come as an ARM template of Microsoft.AlertsManagement/prometheusRuleGroups
made from the very rules the PrometheusRule carries."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from manifests.generate import REPO
from tests.install.chart import render
from tests.install.rendering import Obj, one

EVERYTHING_ON = {
    "monitoring.scrape.enabled": True,
    "monitoring.prometheusRule.enabled": True,
    "monitoring.prometheusRule.runbookBaseUrl": "https://wiki.example.test/elb-gate/runbook",
    "monitoring.dashboard.enabled": True,
}
AZURE = {**EVERYTHING_ON, "monitoring.flavour": "azure-managed-prometheus"}
SEVERITY = {"critical": 0, "warning": 2, "info": 3}
"""Azure Monitor's severities: 0 Critical, 1 Error, 2 Warning, 3 Informational."""
COMPONENT = REPO / "manifests" / "components" / "azure-managed-prometheus"


def _template(objects: list[Obj]) -> dict[str, Any]:
    config = one(objects, "ConfigMap", "elb-gate-prometheus-rule-groups")
    loaded: dict[str, Any] = json.loads(config["data"]["prometheus-rule-groups.json"])
    return loaded


def _operator_rules(sets: dict[str, Any]) -> list[Obj]:
    rule = one(render(sets), "PrometheusRule", "elb-gate")
    return [{**r, "group": g["name"]} for g in rule["spec"]["groups"] for r in g["rules"]]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_the_azure_flavour_renders_no_prometheus_operator_kind(kind: str) -> None:
    objects = render({**AZURE, "monitoring.scrape.kind": kind})
    groups = {o["apiVersion"].split("/")[0] for o in objects}
    assert "monitoring.coreos.com" not in groups
    assert not [o for o in objects if o["kind"] == "PrometheusRule"]
    scrapes = [o for o in objects if o["kind"] == kind]
    assert scrapes and {o["apiVersion"] for o in scrapes} == {"azmonitoring.coreos.com/v1"}


def test_the_rule_groups_template_holds_every_alert_of_the_prometheus_rule() -> None:
    template = _template(render(AZURE))
    expected = _operator_rules(EVERYTHING_ON)
    resources = template["resources"]
    assert {r["type"] for r in resources} == {"Microsoft.AlertsManagement/prometheusRuleGroups"}
    got = {
        rule["alert"]: (resource["name"], rule)
        for resource in resources
        for rule in resource["properties"]["rules"]
    }
    assert set(got) == {r["alert"] for r in expected}
    for want in expected:
        name, rule = got[want["alert"]]
        assert name == f"[format('{want['group']}-{{0}}', parameters('clusterName'))]"
        assert rule["expression"] == want["expr"]
        assert rule["labels"] == want["labels"]
        assert rule["annotations"] == want["annotations"]
        assert rule["severity"] == SEVERITY[want["labels"]["severity"]]
        if "for" in want:
            assert rule["for"] == "PT" + want["for"].upper()
        else:
            assert "for" not in rule
        assert rule["enabled"] is True and rule["actions"] == "[variables('actions')]"


def test_each_rule_group_is_scoped_to_the_workspace_and_the_cluster() -> None:
    template = _template(render(AZURE))
    assert template["$schema"].endswith("/deploymentTemplate.json#")
    required = {n for n, p in template["parameters"].items() if "defaultValue" not in p}
    assert required == {"clusterName", "azureMonitorWorkspaceResourceId"}
    for resource in template["resources"]:
        properties = resource["properties"]
        assert properties["clusterName"] == "[parameters('clusterName')]"
        assert properties["scopes"] == "[variables('scopes')]"
        assert re.fullmatch(r"PT([1-9]|1[0-5])M", properties["interval"])  # Azure: 1 to 15 minutes
        assert re.fullmatch(
            r"[^:@/#{}%&+*<>?]+", resource["name"].split("'")[1].replace("{0}", "aks")
        )
    assert "parameters('azureMonitorWorkspaceResourceId')" in template["variables"]["scopes"]


def test_no_rule_text_is_read_by_azure_as_a_template_expression() -> None:
    """ARM evaluates a string that starts with '[' (unless '[['): only the
    template's own references may."""
    template = _template(render(AZURE))
    for resource in template["resources"]:
        for rule in resource["properties"]["rules"]:
            texts = [rule["expression"], *rule["labels"].values(), *rule["annotations"].values()]
            assert not [t for t in texts if t.startswith("[")], rule["alert"]


def test_the_kustomize_component_ships_the_same_template() -> None:
    shipped = json.loads((COMPONENT / "prometheus-rule-groups.json").read_text())
    assert shipped == _template(
        render({"monitoring.flavour": "azure-managed-prometheus"}, kustomize_profile=True)
    )


def test_the_prometheus_operator_flavour_renders_no_azure_template() -> None:
    objects = render(EVERYTHING_ON)
    assert not [o for o in objects if o["metadata"]["name"] == "elb-gate-prometheus-rule-groups"]
