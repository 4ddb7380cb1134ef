"""Discovery documents (/version, /api, /apis, APIResourceLists) and a minimal OpenAPI v3.

kubectl uses OpenAPI v3 to learn that the server validates fields itself (the PATCH operation
of each kind lists the `fieldValidation` query parameter); it then skips client-side schema
validation and sends `?fieldValidation=Strict`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .resources import RESOURCES, VERBS, ResourceType, group_versions

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4",
    "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T16:02:27Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list() -> dict[str, Any]:
    groups = [_group(g, vs) for g, vs in group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(name: str) -> dict[str, Any] | None:
    versions = group_versions().get(name)
    if not name or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _verbs(rt: ResourceType) -> list[str]:
    return [v for v in VERBS if not (v == "deletecollection" and rt.plural == "namespaces")]


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    served = [r for r in RESOURCES if r.group == group and r.version == version]
    if not served:
        return None
    resources: list[dict[str, Any]] = []
    for r in served:
        entry: dict[str, Any] = {"name": r.plural, "singularName": r.singular,
                                 "namespaced": r.namespaced, "kind": r.kind, "verbs": _verbs(r)}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        resources.append(entry)
        if r.status_subresource:
            resources.append({"name": f"{r.plural}/status", "singularName": "",
                              "namespaced": r.namespaced, "kind": r.kind,
                              "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": served[0].api_version, "resources": resources}


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3_doc(group: str, version: str) -> dict[str, Any] | None:
    """Per group-version OpenAPI v3: one PATCH operation per kind, declaring fieldValidation."""
    served = [r for r in RESOURCES if r.group == group and r.version == version]
    if not served:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for r in served:
        prefix = f"/{_gv_path(group, version)}"
        item = (f"{prefix}/namespaces/{{namespace}}/{r.plural}/{{name}}" if r.namespaced
                else f"{prefix}/{r.plural}/{{name}}")
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        params = [{"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                  for p in ("dryRun", "fieldManager", "fieldValidation", "force")]
        paths[item] = {"patch": {
            "operationId": f"patch{r.kind}",
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
        }}
        schemas[f"{r.api_version.replace('/', '.')}.{r.kind}"] = {
            "type": "object",
            "x-kubernetes-group-version-kind": [gvk],
        }
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}}


def _hash(doc: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()


def openapi_v3_root() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for group, versions in group_versions().items():
        for version in versions:
            doc = openapi_v3_doc(group, version)
            assert doc is not None
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(doc)}"}
    return {"paths": paths}
