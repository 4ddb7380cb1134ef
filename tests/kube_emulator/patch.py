"""PATCH bodies: JSON merge patch, JSON patch, and the subset of strategic merge patch kubectl sends."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from .errors import ApiError, bad_request, unsupported_media_type

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH]

# Merge keys of the built-in types' lists (patchMergeKey), by field name.
_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "volumeMounts": "mountPath", "imagePullSecrets": "name",
    "conditions": "type", "ownerReferences": "uid", "hostAliases": "ip", "webhooks": "name",
    "topologySpreadConstraints": "topologyKey", "volumeDevices": "devicePath",
}
_PRIMITIVE_MERGE = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _merge_key(field: str | None, items: list[Any]) -> str | None:
    if field == "ports":
        return "containerPort" if any("containerPort" in i for i in items if isinstance(i, dict)) \
            else "port"
    return _MERGE_KEYS.get(field or "")


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch for maps and merge-keyed lists (directives mostly honoured)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = strategic_merge_patch(result.get(key), value)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    current = current if isinstance(current, list) else []
    if field in _PRIMITIVE_MERGE:
        return current + [v for v in patch if v not in current]
    key = _merge_key(field, patch + current)
    if key is None or not all(isinstance(i, dict) for i in patch):
        return [i for i in copy.deepcopy(patch) if not (isinstance(i, dict) and "$patch" in i)]
    result = copy.deepcopy(current)
    for item in patch:
        if item.get("$patch") == "replace":
            return [i for i in copy.deepcopy(patch) if i.get("$patch") != "replace"]
        index = next((n for n, c in enumerate(result)
                      if isinstance(c, dict) and c.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(strategic_merge_patch({}, item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def apply_patch(content_type: str, current: dict[str, Any], body: Any) -> dict[str, Any]:
    """The patched object, or the apiserver's error for a bad patch."""
    media = content_type.split(";")[0].strip()
    if media == JSON_PATCH:
        if not isinstance(body, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            result = jsonpatch.apply_patch(current, body)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error "
                           f"in our request: {exc}") from None
    elif media == MERGE_PATCH:
        result = merge_patch(current, body)
    elif media == STRATEGIC_PATCH:
        result = strategic_merge_patch(current, body)
    else:
        raise unsupported_media_type(PATCH_TYPES)
    if not isinstance(result, dict):
        raise bad_request("patch did not produce an object")
    return result
