"""Fixtures of the install tests: a scratch copy of manifests/ with generated
certificates (the operator's own manifests/overlays/generated is never touched),
and every target rendered once per session."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from certs.cli import main as certs_main
from testbed.install import render
from tests.install.rendering import MANIFESTS, TARGETS, Obj


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<tmp>/manifests``: the repository's manifests plus a freshly generated overlay."""
    root = tmp_path_factory.mktemp("install")
    manifests = root / "manifests"
    shutil.copytree(MANIFESTS, manifests, ignore=shutil.ignore_patterns("generated"))
    out = io.StringIO()
    code = certs_main(
        [
            "--out",
            str(root / "certs-out"),
            "--overlay",
            str(manifests / "overlays" / "generated"),
            "--base",
            str(manifests / "base"),
        ],
        out=out,
    )
    assert code == 0, out.getvalue()
    return manifests


@pytest.fixture(scope="session")
def rendered(workspace: Path) -> dict[str, list[Obj]]:
    """Target (e.g. ``overlays/warn``) → its rendered objects."""
    return {target: render(workspace / target) for target in TARGETS}
