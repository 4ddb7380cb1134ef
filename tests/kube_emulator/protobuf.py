"""Decode the protobuf bodies kubectl's typed `create` subcommands send (namespace, configmap,
secret, serviceaccount): the `k8s\\0` envelope (runtime.Unknown) and a few generated.proto types.
"""

from __future__ import annotations

import base64
from typing import Any

from .errors import bad_request

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"

# field number → (json name, kind); kind is "s"tring, "b"ytes, "i"nt, "?"bool, "[s" repeated
# string, "{s"/"{b" map to string/bytes, "[m:Type" repeated message, "m:Type" message.
Schema = dict[int, tuple[str, str]]
_SCHEMAS: dict[str, Schema] = {
    "ObjectMeta": {1: ("name", "s"), 2: ("generateName", "s"), 3: ("namespace", "s"),
                   5: ("uid", "s"), 6: ("resourceVersion", "s"), 11: ("labels", "{s"),
                   12: ("annotations", "{s"), 14: ("finalizers", "[s")},
    "Namespace": {1: ("metadata", "m:ObjectMeta"), 2: ("spec", "m:NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "[s")},
    "ConfigMap": {1: ("metadata", "m:ObjectMeta"), 2: ("data", "{s"), 3: ("binaryData", "{b"),
                  4: ("immutable", "?")},
    "Secret": {1: ("metadata", "m:ObjectMeta"), 2: ("data", "{b"), 3: ("type", "s"),
               4: ("stringData", "{s"), 5: ("immutable", "?")},
    "ServiceAccount": {1: ("metadata", "m:ObjectMeta"),
                       4: ("automountServiceAccountToken", "?")},
    "TypeMeta": {1: ("apiVersion", "s"), 2: ("kind", "s")},
    "Unknown": {1: ("typeMeta", "m:TypeMeta"), 2: ("raw", "b")},
    "Entry": {1: ("key", "s"), 2: ("value", "b")},
}


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one message: varints and length-delimited only."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result

    while pos < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 2:
            size = varint()
            out.append((number, data[pos:pos + size]))
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise bad_request(f"unsupported protobuf wire type {wire}")
    return out


def _message(data: bytes, type_name: str) -> dict[str, Any]:
    schema = _SCHEMAS[type_name]
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if kind.startswith("m:") and isinstance(value, bytes):
            obj[name] = _message(value, kind[2:])
        elif kind == "[s" and isinstance(value, bytes):
            obj.setdefault(name, []).append(value.decode())
        elif kind.startswith("{") and isinstance(value, bytes):
            entry = _message(value, "Entry")
            raw = entry.get("value", b"")
            obj.setdefault(name, {})[entry.get("key", "")] = (
                raw.decode() if kind == "{s" else base64.b64encode(raw).decode())
        elif kind == "s" and isinstance(value, bytes):
            obj[name] = value.decode()
        elif kind == "b":
            obj[name] = value
        elif kind == "?":
            obj[name] = bool(value)
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """A JSON-shaped object from a kubectl protobuf request body."""
    if not body.startswith(_MAGIC):
        raise bad_request("provided protobuf body has no k8s envelope")
    unknown = _message(body[len(_MAGIC):], "Unknown")
    type_meta = unknown.get("typeMeta", {})
    kind = type_meta.get("kind", "")
    if kind not in _SCHEMAS or kind in ("TypeMeta", "Unknown", "Entry", "ObjectMeta"):
        raise bad_request(f"the emulator cannot decode protobuf for kind {kind!r}; send JSON")
    return {"apiVersion": type_meta.get("apiVersion"), "kind": kind,
            **_message(unknown.get("raw", b""), kind)}
