"""Render the Helm chart for the install tests: ``helm template`` with the pinned
helm ``make helm`` builds, parsed into objects, cached per set of values."""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from manifests.generate import CHART, VALUES, helm_path
from tests.install.rendering import Obj

NAMESPACE = "elb-system"


def helm() -> Path:
    """The helm binary; a clear failure when `make helm` has not been run."""
    path = helm_path()
    assert path.is_file(), f"{path} is missing: run `make helm` (make test does)"
    return path


def template_argv(
    sets: Mapping[str, Any], namespace: str = NAMESPACE, kustomize_profile: bool = False
) -> list[str]:
    argv = [str(helm()), "template", "elb-gate", str(CHART), "--namespace", namespace]
    if kustomize_profile:
        argv += ["-f", str(VALUES)]
    for key, value in sets.items():
        argv += ["--set-json", f"{key}={json.dumps(value)}"]
    return argv


@functools.cache
def _render(frozen: tuple[tuple[str, str], ...], namespace: str, kustomize_profile: bool) -> str:
    sets = {k: json.loads(v) for k, v in frozen}
    proc = subprocess.run(
        template_argv(sets, namespace, kustomize_profile),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ChartError(proc.stderr.strip())
    return proc.stdout


class ChartError(Exception):
    """``helm template`` refused the values; the message is helm's."""


def render(
    sets: Mapping[str, Any] | None = None,
    *,
    namespace: str = NAMESPACE,
    kustomize_profile: bool = False,
    raw: bool = False,
) -> list[Obj]:
    """The chart's objects for ``sets`` (dotted keys, any JSON value) on top of the
    chart defaults (or of manifests/kustomize-values.yaml with ``kustomize_profile``),
    plus the webhook configurations the controller registers (unless ``raw``)."""
    frozen = tuple(sorted((k, json.dumps(v)) for k, v in (sets or {}).items()))
    text = _render(frozen, namespace, kustomize_profile)
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    if raw:
        return docs
    return docs + registered(docs)


REGISTRATION_CONFIGMAP = "elb-gate-webhook-configurations"


def registered(docs: list[Obj]) -> list[Obj]:
    """The webhook configurations the controller registers from the chart's
    ConfigMap (``webhook.registration: controller``, the default), as objects."""
    return [
        json.loads(raw)
        for doc in docs
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == REGISTRATION_CONFIGMAP
        for raw in doc["data"].values()
    ]
