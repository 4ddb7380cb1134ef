"""One source for both installs: the kustomize manifests are the chart's output
(generated, and up to date), and what kustomize does natively (hashed
ConfigMaps, per-namespace RoleBindings, the warn component, the TLS overlays)
yields the same objects as the chart with the matching values."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from manifests.generate import REPO, differences, generated
from testbed import install
from tests.install.chart import helm, render
from tests.install.rendering import Obj

HASHED = re.compile(r"^(elb-gate-(?:settings|submitters))-[a-z0-9]{10}$")
Key = tuple[str, str, str]


def _unhash(name: str) -> str:
    match = HASHED.match(name)
    return match[1] if match else name


STANDARD_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
"""Helm's release labels (tests/install/test_standard_labels.py): the chart's
objects carry them, what kustomize makes natively does not, and the manifests
leave out the two that name Helm."""


def _without_standard_labels(meta: dict[str, Any]) -> None:
    labels = meta.get("labels") or {}
    for key in STANDARD_LABELS:
        labels.pop(key, None)


def normalized(objects: list[Obj]) -> dict[Key, Obj]:
    """Objects keyed by (kind, namespace, name), without what differs by design:
    kustomize's ConfigMap name hashes vs the chart's checksum annotations, key
    material generated afresh by each render, and Helm's release labels."""
    out: dict[Key, Obj] = {}
    for original in objects:
        obj = copy.deepcopy(original)
        meta = obj["metadata"]
        meta["name"] = _unhash(meta["name"])
        _without_standard_labels(meta)
        if "template" in obj.get("spec", {}) and "metadata" in obj["spec"]["template"]:
            _without_standard_labels(obj["spec"]["template"]["metadata"])
        if obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            annotations = template["metadata"].get("annotations", {})
            for key in [k for k in annotations if k.startswith("checksum/")]:
                del annotations[key]
            if not annotations:
                template["metadata"].pop("annotations", None)
            pod = template["spec"]
            for container in pod["containers"]:
                for source in container.get("envFrom", []):
                    source["configMapRef"]["name"] = _unhash(source["configMapRef"]["name"])
            for volume in pod.get("volumes", []):
                if "configMap" in volume:
                    volume["configMap"]["name"] = _unhash(volume["configMap"]["name"])
        if obj["kind"] == "ConfigMap" and meta["name"] == "elb-gate-submitters":
            obj["data"] = {k: yaml.safe_load(v) for k, v in obj["data"].items()}
        if obj["kind"] == "Secret":
            # Made by `make certs` or by the chart, each with its own fresh keys.
            obj = {"kind": "Secret", "type": obj["type"], "keys": sorted(obj["data"])}
        for hook in obj.get("webhooks", []):
            hook["clientConfig"].pop("caBundle", None)
        out[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
    return out


def _diff(left: dict[Key, Obj], right: dict[Key, Obj]) -> list[str]:
    problems = [f"only in kustomize: {k}" for k in sorted(left.keys() - right.keys())]
    problems += [f"only in the chart: {k}" for k in sorted(right.keys() - left.keys())]
    problems += [f"differs: {k}" for k in sorted(left.keys() & right.keys()) if left[k] != right[k]]
    return problems


def _chart(sets: dict[str, Any]) -> dict[Key, Obj]:
    base = {"configMaps.create": True, "monitoring.scrape.enabled": False}
    base |= {"monitoring.prometheusRule.enabled": False, "monitoring.dashboard.enabled": False}
    return normalized(render({**base, **sets}, kustomize_profile=True))


def test_the_generated_manifests_are_what_the_chart_renders_now() -> None:
    stale = differences(generated(helm()), REPO / "manifests")
    assert stale == [], f"run `make manifests`: {stale}"


def test_every_generated_file_says_so_and_names_its_template() -> None:
    for target in generated(helm()):
        if target.endswith(".yaml"):
            text = (REPO / "manifests" / target).read_text()
            assert text.startswith("# GENERATED from charts/elb-gate/templates/"), target


@pytest.mark.parametrize(
    ("target", "sets"),
    [
        ("overlays/cert-manager", {"certificates.source": "cert-manager"}),
        ("overlays/generated", {"certificates.source": "generated"}),
        ("overlays/warn", {"certificates.source": "generated", "enforcement": "warn"}),
    ],
)
def test_each_kustomize_install_is_the_chart_with_the_same_choices(
    rendered: dict[str, list[Obj]], target: str, sets: dict[str, Any]
) -> None:
    assert _diff(normalized(rendered[target]), _chart(sets)) == []


def test_a_second_gated_namespace_made_the_kustomize_way_is_the_charts_list(
    workspace: Path,
) -> None:
    gated = workspace / "gated-namespaces"
    (gated / "blast").mkdir(exist_ok=True)
    (gated / "blast" / "kustomization.yaml").write_text(
        (gated / "default" / "kustomization.yaml")
        .read_text()
        .replace("namespace: default", "namespace: blast")
    )
    (gated / "kustomization.yaml").write_text(
        (gated / "kustomization.yaml")
        .read_text()
        .replace("  - default\n", "  - default\n  - blast\n")
    )
    env = workspace / "base" / "settings.env"
    original = env.read_text()
    try:
        env.write_text(
            original.replace("ELB_GATE_NAMESPACES=default", "ELB_GATE_NAMESPACES=default,blast")
        )
        ours = normalized(install.render(workspace / "overlays" / "cert-manager"))
    finally:
        env.write_text(original)
        (gated / "kustomization.yaml").write_text(
            (gated / "kustomization.yaml").read_text().replace("  - blast\n", "")
        )
    chart = _chart({"certificates.source": "cert-manager", "gatedNamespaces": ["default", "blast"]})
    assert _diff(ours, chart) == []


def test_the_azure_component_is_the_charts_azure_flavour(workspace: Path) -> None:
    site = workspace / "overlays" / "azure-site"
    site.mkdir(exist_ok=True)
    (site / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../cert-manager]\ncomponents: [../../components/azure-managed-prometheus]\n"
    )
    ours = normalized(install.render(site))
    chart = _chart(
        {
            "certificates.source": "cert-manager",
            "monitoring.flavour": "azure-managed-prometheus",
            "monitoring.scrape.enabled": True,
        }
    )
    assert _diff(ours, chart) == []
    assert ("ServiceMonitor", "elb-system", "elb-gate") in ours
