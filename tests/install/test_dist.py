"""`make dist`: the wheel and the sdist carry the product and nothing else, and the wheel
installed into a fresh virtualenv gives a working ``elb-gate`` command (docs/cli.md)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from image import build
from image.dist import outside_product
from tests.install.rendering import REPO

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "image.dist", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def members(path: Path) -> list[str]:
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as whl:
            return whl.namelist()
    with tarfile.open(path) as sdist:
        return [m.name for m in sdist.getmembers() if m.isfile()]


def test_the_wheel_and_the_sdist_carry_the_product_only(dist: Path) -> None:
    built = sorted(p.name for p in dist.iterdir())
    assert built == ["elb_gate-0.1.0-py3-none-any.whl", "elb_gate-0.1.0.tar.gz"]
    for path in dist.iterdir():
        names = members(path)
        assert not outside_product(names), path.name
        tops = {n.split("/")[1] if path.suffix == ".gz" else n.split("/")[0] for n in names}
        assert not tops & {"testbed", "tests", "bench", "image", "manifests", "lincheck"}
        for package in build.PRODUCT:
            assert any(f"{package}/__init__.py" in n for n in names), (path.name, package)


def test_the_check_refuses_a_file_outside_the_product() -> None:
    assert outside_product(["elb_gate-0.1.0/testbed/clients.py"]) == [
        "elb_gate-0.1.0/testbed/clients.py"
    ]
    assert outside_product(["tests/conftest.py", "client/cli/__init__.py"]) == ["tests/conftest.py"]


def test_the_wheel_installed_in_a_fresh_venv_runs_elb_gate_help(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
    # The locked runtime wheels (the image's, cached by `make image`), checked by hash.
    wheels = build.fetch_wheels()
    subprocess.run(
        [
            *pip,
            "--find-links",
            str(wheels),
            "--require-hashes",
            "-r",
            str(REPO / "requirements" / "runtime.txt"),
        ],
        check=True,
        timeout=600,
    )
    (wheel,) = dist.glob("*.whl")
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, timeout=300)
    done = subprocess.run(
        [str(venv / "bin" / "elb-gate"), "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository: the command must come from the venv alone
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "census" in done.stdout and "submit" in done.stdout, done.stdout
    located = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import client; print(client.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        timeout=60,
    )
    assert str(venv) in located.stdout, located.stdout
