"""The image: the Dockerfile (`docker build`, `az acr build`) and `make image` (built
here from Debian packages with no registry) make the same image — Debian bookworm's
Python, the venv from the locked wheels, uid/gid 10001, the same entry points — and
the lock files pin every dependency with hashes."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from image import build
from tests.install.image_contents import PYTHON_OF_DEBIAN, dockerfile_final, lock_pins
from tests.install.rendering import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
IGNORE = (REPO / ".dockerignore").read_text().split("\n")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _stages() -> list[str]:
    return re.split(r"^FROM ", DOCKERFILE, flags=re.MULTILINE)[1:]


def test_the_image_is_built_in_two_stages_from_the_debian_release_make_image_uses() -> None:
    stages = _stages()
    assert len(stages) == 2
    base = re.search(
        r"^ARG DEBIAN_IMAGE=debian:(\w+)-slim@sha256:[0-9a-f]{64}$", DOCKERFILE, flags=re.MULTILINE
    )
    assert base, "the Dockerfile's base is a Debian slim image, pinned by digest"
    assert base.group(1) == build.SUITE  # so both get the same python3 package
    assert PYTHON_OF_DEBIAN[build.SUITE] == build.PYTHON_MINOR
    assert all(s.startswith("${DEBIAN_IMAGE}") for s in stages)


def test_the_final_stage_is_make_images_runtime_non_root_without_build_tools() -> None:
    final = dockerfile_final(DOCKERFILE)
    assert final.user == f"{build.UID}:{build.GID}"
    assert final.ids == (build.UID, build.GID)
    assert final.cmd == list(build.CMD)
    assert final.ports == sorted(build.PORTS)
    assert final.apt_packages == sorted(build.DEBIAN_PACKAGES)
    assert final.env["PATH"].startswith(f"{build.PREFIX}/bin:")
    image_env = dict(e.split("=", 1) for e in build.ENV)
    assert {k: v for k, v in final.env.items() if k != "PATH"} == {
        k: v for k, v in image_env.items() if k != "PATH"
    }
    assert f"COPY --from=build {build.PREFIX} {build.PREFIX}" in final.text
    assert not re.search(r"gcc|build-essential|pip install|python3-venv", final.text)


def test_the_build_stage_installs_the_lock_with_hashes_then_the_product_without_deps() -> None:
    build_stage = _stages()[0]
    assert "pip install --require-hashes -r requirements/build.txt" in build_stage
    assert (
        "pip install --require-hashes --only-binary=:all: -r requirements/runtime.txt"
        in build_stage
    )
    assert "pip install --no-deps --no-build-isolation ." in build_stage
    assert "pip uninstall -y pip setuptools" in build_stage
    copied = re.findall(r"^COPY (\w+) \./\1$", build_stage, flags=re.MULTILINE)
    assert sorted(copied) == sorted(build.PRODUCT)  # client/ too: `elb-gate` works


def test_the_product_is_exactly_the_wheels_packages_and_the_test_bed_is_not_one() -> None:
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(include) == sorted(f"{p}*" for p in build.PRODUCT)
    assert not {"testbed", "tests", "bench", "image", "manifests"} & set(build.PRODUCT)


def test_keys_and_local_state_never_enter_the_build_context() -> None:
    assert IGNORE[IGNORE.index("*") + 1 :]  # everything is excluded, then re-included
    allowed = {line[1:].rstrip("/") for line in IGNORE if line.startswith("!")}
    assert allowed == {
        "pyproject.toml",
        "README.md",
        "requirements/runtime.txt",
        "requirements/build.txt",
        *build.PRODUCT,
    }
    assert "certs/out/" in IGNORE


def test_every_dependency_is_pinned_with_hashes_and_the_locks_agree() -> None:
    runtime, dev, tools = (
        lock_pins(REPO / f"requirements/{n}.txt") for n in ("runtime", "dev", "build")
    )
    for name, (version, hashes) in {**runtime, **dev, **tools}.items():
        assert hashes, f"{name}=={version} has no --hash"
    for spec in PYPROJECT["project"]["dependencies"]:
        req = Requirement(spec)
        assert Version(runtime[req.name.lower()][0]) in req.specifier, spec
    for spec in PYPROJECT["project"]["optional-dependencies"]["test"]:
        req = Requirement(spec)
        assert Version(dev[req.name.lower()][0]) in req.specifier, spec
    # The suite runs on the versions the image ships.
    assert {n: v for n, (v, _) in runtime.items()} == {
        n: dev[n][0] for n in runtime if n in dev
    } and set(runtime) <= set(dev)
    for spec in PYPROJECT["build-system"]["requires"]:
        req = Requirement(spec)
        assert Version(tools[req.name.lower()][0]) in req.specifier, spec
    assert "pip" in tools
