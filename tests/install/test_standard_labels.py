"""Every object the chart renders carries Helm's standard labels (instance,
version, managed-by, helm.sh/chart), whatever the values; the kustomize
manifests keep instance and version and drop the two that name Helm."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from manifests.generate import CHART
from tests.install.chart import render
from tests.install.rendering import Obj
from tests.install.test_chart import COMBINATIONS

CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
EXPECTED = {
    "app.kubernetes.io/instance": "elb-gate",
    "app.kubernetes.io/version": str(CHART_META["appVersion"]),
    "app.kubernetes.io/managed-by": "Helm",
    "helm.sh/chart": f"elb-gate-{CHART_META['version']}",
    "app.kubernetes.io/part-of": "elb-gate",
}
EVERYTHING = {
    **COMBINATIONS[
        "security: submitter RBAC and policy, client certificates, admission port peers"
    ],
    **COMBINATIONS["prometheus operator, everything on"],
    "namespace.create": True,
}


def _missing(objects: list[Obj]) -> list[str]:
    out = []
    for obj in objects:
        labels: dict[str, Any] = obj["metadata"].get("labels") or {}
        wrong = {k: labels.get(k) for k, v in EXPECTED.items() if labels.get(k) != v}
        if wrong:
            out.append(f"{obj['kind']}/{obj['metadata']['name']}: {wrong}")
    return out


@pytest.mark.parametrize(
    "sets",
    [
        {},
        EVERYTHING,
        {**EVERYTHING, "monitoring.flavour": "azure-managed-prometheus"},
        {**EVERYTHING, "monitoring.scrape.kind": "PodMonitor"},
        {"certificates.source": "cert-manager"},
    ],
    ids=["defaults", "everything", "azure", "pod-monitors", "cert-manager"],
)
def test_every_object_carries_the_standard_labels(sets: dict[str, Any]) -> None:
    objects = render(sets)
    assert len(objects) > 20 or not sets
    assert _missing(objects) == []


def test_the_kustomize_manifests_name_no_helm_release_manager(
    rendered: dict[str, list[Obj]],
) -> None:
    for target, objects in rendered.items():
        for obj in objects:
            labels = obj["metadata"].get("labels") or {}
            assert "helm.sh/chart" not in labels, (target, obj["metadata"]["name"])
            assert labels.get("app.kubernetes.io/managed-by") != "Helm"
