"""Kubernetes OpenAPI schema validation with the schemas `kubernetes-validate`
ships, loaded once per version (its own ``validate`` re-reads the multi-megabyte
definitions file on every call, which made these tests slow)."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

import jsonschema
import referencing
from kubernetes_validate.utils import all_versions
from packaging.version import Version

SCHEMA_ROOT = resources.files("kubernetes_validate") / "kubernetes-json-schema"


def shipped_versions() -> list[str]:
    """Kubernetes versions with schemas, oldest first, as ``major.minor``."""
    return sorted({re.sub(r"^(\d+\.\d+).*", r"\1", v) for v in all_versions()}, key=Version)


class SchemaMissing(LookupError):
    """No schema for this kind/apiVersion (a custom resource)."""


@functools.cache
def _registry(version: str) -> tuple[Any, referencing.Registry]:
    folder = SCHEMA_ROOT / f"v{version}.0-local-strict"
    definitions = json.loads((folder / "_definitions.json").read_text())
    return folder, referencing.Resource.from_contents(definitions) @ referencing.Registry()


@functools.cache
def _validator(version: str, kind: str, api_version: str) -> jsonschema.Draft202012Validator:
    folder, registry = _registry(version)
    # rbac.authorization.k8s.io/v1 -> rbac-v1, the file naming of the schema set.
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = folder / f"{kind.lower()}-{group}.json"
    if not path.is_file():
        raise SchemaMissing(f"{kind} {api_version}")
    schema = json.loads(path.read_text())
    return jsonschema.Draft202012Validator(
        schema, registry=referencing.Resource.from_contents(schema) @ registry
    )


def errors(obj: dict[str, Any], version: str) -> list[str]:
    """Strict-schema violations of ``obj`` (unknown fields included); ``SchemaMissing``
    for kinds the Kubernetes OpenAPI does not define."""
    validator = _validator(version, obj["kind"], obj["apiVersion"])
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(obj)
    ]
