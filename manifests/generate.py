"""Render the kustomize manifests from the Helm chart: one source for both installs.

    python -m manifests.generate [--helm PATH] [--check]

The chart (charts/elb-gate) is the source of every object; the files listed in
:data:`ROUTES` are its output for ``manifests/kustomize-values.yaml``, each
written next to the kustomizations that use it, with a header saying so.
``--check`` writes nothing and exits 1 naming the files that differ (what the
install tests run, so a template edited without ``make manifests`` fails CI).

Kustomize keeps what it does natively, and the install tests hold those equal to
the chart: the settings and identity ConfigMaps (configMapGenerator), the
per-namespace RoleBindings (gated-namespaces/), the warn component, the TLS
overlays.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "elb-gate"
VALUES = REPO / "manifests" / "kustomize-values.yaml"
NAMESPACE = "elb-system"
RELEASE = "elb-gate"
HELM_VERSION = "v3.22.0"
DEFAULT_HELM = REPO / ".build" / f"helm-{HELM_VERSION}" / "helm"


@dataclass(frozen=True)
class Render:
    """One ``helm template`` run: extra ``--set`` values on top of :data:`VALUES`."""

    name: str
    sets: tuple[str, ...] = ()


RENDERS = (
    Render("base"),
    Render("cert-manager", ("certificates.source=cert-manager",)),
    Render("azure", ("monitoring.flavour=azure-managed-prometheus",)),
)

ROUTES: dict[tuple[str, str], str] = {
    # (render, chart template) → file under manifests/
    ("base", "namespace.yaml"): "base/namespace.yaml",
    ("base", "serviceaccounts.yaml"): "base/serviceaccounts.yaml",
    ("base", "rbac.yaml"): "base/rbac.yaml",
    ("base", "webhook.yaml"): "base/webhook.yaml",
    ("base", "controller.yaml"): "base/controller.yaml",
    ("base", "networkpolicy.yaml"): "base/networkpolicy.yaml",
    ("base", "priority-quota.yaml"): "base/priority-quota.yaml",
    ("base", "admission-webhooks.yaml"): "base/admission-webhooks.yaml",
    ("base", "scrape.yaml"): "monitoring/servicemonitor.yaml",
    ("base", "prometheusrule.yaml"): "monitoring/prometheusrule.yaml",
    ("base", "dashboard.yaml"): "monitoring/dashboard.yaml",
    ("cert-manager", "certificates.yaml"): "overlays/cert-manager/certificates.yaml",
    ("azure", "scrape.yaml"): "components/azure-managed-prometheus/servicemonitor.yaml",
    ("azure", "networkpolicy.yaml"): "components/azure-managed-prometheus/networkpolicy.yaml",
}
"""Every generated file. Templates not routed here are kustomize-native (see above)."""

EXTRACTS: dict[tuple[str, str], tuple[str, str]] = {
    ("azure", "prometheusrule.yaml"): (
        "prometheus-rule-groups.json",
        "components/azure-managed-prometheus/prometheus-rule-groups.json",
    ),
}
"""(render, template) → (ConfigMap data key, file): a file held in a rendered
ConfigMap, written as it is (the ARM template of the alerts for Azure Managed
Prometheus, for `az deployment group create`)."""

COPIES = {"charts/elb-gate/dashboards/elb-gate.json": "monitoring/elb-gate-dashboard.json"}
"""Files copied as they are (the dashboard, for a Grafana import by hand)."""

HELM_ONLY_LABELS = re.compile(
    r"^[ \t]*(helm\.sh/chart|app\.kubernetes\.io/managed-by): .*\n", flags=re.MULTILINE
)
"""The chart's labels that say Helm manages an object: not true of what kustomize
applies, so they are left out of the manifests (instance and version stay)."""

SOURCE = re.compile(r"^# Source: [^/]+/templates/(?P<template>\S+)\s*$")


def helm_path() -> Path:
    """The pinned helm ``make helm`` builds (or ``$ELB_GATE_HELM``)."""
    return Path(os.environ.get("ELB_GATE_HELM") or DEFAULT_HELM)


def helm_template(helm: Path, sets: Sequence[str] = (), values: Path = VALUES) -> str:
    """``helm template`` of the chart as the kustomize manifests are rendered."""
    if not helm.is_file():
        raise SystemExit(f"{helm} not found: run `make helm` (builds helm {HELM_VERSION} once)")
    argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(values)]
    for item in sets:
        argv += ["--set", item]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"helm template failed:\n{proc.stderr}")
    return proc.stdout


def split_by_template(rendered: str) -> dict[str, list[str]]:
    """Template file name → its documents (text, comments kept), in helm's order."""
    out: dict[str, list[str]] = {}
    for doc in re.split(r"^---\s*$", rendered, flags=re.MULTILINE):
        lines = doc.strip("\n").splitlines()
        if not lines:
            continue
        match = SOURCE.match(lines[0])
        if match is None:
            raise ValueError(f"a rendered document without its # Source line: {lines[:3]}")
        body = "\n".join(lines[1:]).strip("\n")
        if any(line.strip() and not line.lstrip().startswith("#") for line in body.splitlines()):
            out.setdefault(match["template"], []).append(body)
    return out


def in_template_order(template: str, docs: list[str]) -> list[str]:
    """``docs`` in the order their kinds appear in the template's source, so a
    generated file reads as the template was written (helm sorts by kind)."""
    source = (CHART / "templates" / template).read_text()

    def position(doc: str) -> int:
        kind = re.search(r"^kind: (\S+)", doc, flags=re.MULTILINE)
        found = source.find(f"kind: {kind[1]}") if kind else -1
        return found if found >= 0 else len(source)

    return sorted(docs, key=position)


def header(render: str, template: str) -> str:
    """What a reader of a generated file needs first."""
    extra = next((r.sets for r in RENDERS if r.name == render), ())
    setting = f" with {', '.join(extra)}" if extra else ""
    return (
        f"# GENERATED from charts/elb-gate/templates/{template} by `make manifests`\n"
        f"# (values: manifests/kustomize-values.yaml{setting}). Edit the template and\n"
        "# run `make manifests`; tests/install fails while the two disagree.\n"
    )


def generated(helm: Path) -> dict[str, str]:
    """Relative path under manifests/ → the text it must hold."""
    files: dict[str, str] = {}
    for render in RENDERS:
        docs = split_by_template(helm_template(helm, render.sets))
        for (name, template), target in ROUTES.items():
            if name != render.name:
                continue
            if template not in docs:
                raise SystemExit(f"render {name!r} produced nothing from templates/{template}")
            ordered = in_template_order(template, docs[template])
            text = "---\n".join(d + "\n" for d in ordered)
            files[target] = header(name, template) + HELM_ONLY_LABELS.sub("", text)
        for (name, template), (key, target) in EXTRACTS.items():
            if name != render.name:
                continue
            (config,) = [yaml.safe_load(d) for d in docs.get(template, [])] or [None]
            if not config or key not in config.get("data", {}):
                raise SystemExit(f"render {name!r} has no {key} in templates/{template}")
            files[target] = config["data"][key].rstrip("\n") + "\n"
    for source, target in COPIES.items():
        files[target] = (REPO / source).read_text()
    return files


def differences(files: Mapping[str, str], root: Path) -> list[str]:
    """The generated files whose content on disk differs (or is missing)."""
    stale = []
    for target, text in sorted(files.items()):
        path = root / target
        if not path.is_file() or path.read_text() != text:
            stale.append(target)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or ``--check``) every generated file; the exit code says if any was stale."""
    parser = argparse.ArgumentParser(prog="python -m manifests.generate", description=__doc__)
    parser.add_argument(
        "--helm", type=Path, default=None, help="helm binary (default: make helm's)"
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    files = generated(args.helm or helm_path())
    root = REPO / "manifests"
    stale = differences(files, root)
    if args.check:
        for target in stale:
            print(f"manifests/{target} is stale: run `make manifests`", file=sys.stderr)
        return 1 if stale else 0
    for target in stale:
        (root / target).parent.mkdir(parents=True, exist_ok=True)
        (root / target).write_text(files[target])
        print(f"wrote manifests/{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
