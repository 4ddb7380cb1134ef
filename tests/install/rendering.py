"""Render kustomize targets the way an operator applies them, for the install tests."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
TARGETS = (
    "base",
    "overlays/generated",
    "overlays/warn",
    "overlays/cert-manager",
    "monitoring",
)
"""Every kustomization an operator applies (the generated one made by `make certs`)."""
INSTALL_TARGETS = ("overlays/generated", "overlays/warn", "overlays/cert-manager")
"""The targets that install elb-gate itself (base + certificates)."""

Obj = dict[str, Any]


def select(objects: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    """Objects of ``kind`` (and ``name``, when given)."""
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: Iterable[Obj], kind: str, name: str) -> Obj:
    """The single object of ``kind``/``name``; fails the test when absent or repeated."""
    found = select(objects, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def by_name_prefix(objects: Iterable[Obj], kind: str, prefix: str) -> Obj:
    """The single ``kind`` whose name starts with ``prefix`` (generated, hashed names)."""
    found = [o for o in select(objects, kind) if o["metadata"]["name"].startswith(prefix)]
    assert len(found) == 1, f"expected one {kind} named {prefix}*, found {len(found)}"
    return found[0]
