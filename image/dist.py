"""The CLI and the product as Python distributions: `make dist`.

Writes ``dist/elb_gate-<version>-py3-none-any.whl`` and ``dist/elb_gate-<version>.tar.gz``,
both built with the locked setuptools (``requirements/build.txt``, no build isolation)
from a copy of exactly what the product ships: ``pyproject.toml``, ``README.md`` and the
modules of its packages (``elbgate``, ``client``, ``webhook``, ``controller``,
``certs``: pyproject's include list). The test bed, the tests, the benchmarks and the
image build stay in the repository. An operator installs the ``elb-gate`` command from
the wheel with ``pipx install dist/elb_gate-<version>-py3-none-any.whl``
(docs/cli.md). Each archive is checked before it is kept: a file outside the product
is an error.

Standard library only, run with the project's venv Python.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from image.build import PRODUCT, REPO, source_date_epoch

DIST = REPO / "dist"
TOP_LEVEL = ("pyproject.toml", "README.md")


def _copy_product(into: Path) -> None:
    for name in TOP_LEVEL:
        shutil.copy2(REPO / name, into / name)
    for package in PRODUCT:
        for module in sorted((REPO / package).rglob("*.py")):
            copy = into / module.relative_to(REPO)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(module, copy)


def outside_product(names: list[str]) -> list[str]:
    """Archive members that are neither a product module nor packaging metadata."""
    allowed = tuple(f"{p}/" for p in PRODUCT)
    out = []
    for name in names:
        parts = name.split("/")
        # sdist: elb_gate-<v>/<path>; wheel: <path> or elb_gate-<v>.dist-info/...
        rel = "/".join(parts[1:]) if parts[0].startswith("elb_gate-") and len(parts) > 1 else name
        if parts[0].endswith((".dist-info", ".egg-info")) or ".egg-info/" in rel:
            continue
        if rel in ("", *TOP_LEVEL, "PKG-INFO", "setup.cfg") or rel.startswith(allowed):
            continue
        out.append(name)
    return out


def build(out: Path = DIST) -> list[Path]:
    """Build the sdist and the wheel into ``out`` (emptied first); their paths."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(source_date_epoch())}
    with tempfile.TemporaryDirectory(prefix="elb-gate-dist.") as src:
        _copy_product(Path(src))
        hooks = (
            # setuptools rewrites sys.argv while it builds: read the target first.
            "import sys; out = sys.argv[1]; from setuptools import build_meta as b; "
            "b.build_sdist(out); b.build_wheel(out)"
        )
        done = subprocess.run(
            [sys.executable, "-c", hooks, str(out)],
            cwd=src,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"the build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    built = sorted(out.glob("elb_gate-*"))
    for path in built:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as whl:
                names = whl.namelist()
        else:
            with tarfile.open(path) as sdist:
                names = [m.name for m in sdist.getmembers() if m.isfile()]
        stray = outside_product(names)
        if stray:
            raise SystemExit(f"{path.name} carries files outside the product: {stray[:10]}")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m image.dist", description=__doc__)
    parser.add_argument("--out", type=Path, default=DIST, help="output directory (emptied)")
    args = parser.parse_args(argv)
    for path in build(args.out):
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
