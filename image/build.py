"""Build the elb-gate OCI image with no image registry: `make image`.

The root filesystem is Debian bookworm's ``python3`` and ``ca-certificates``
(extracted by mmdebstrap from Debian's signed archive, no maintainer scripts,
no package manager left), the locked wheels (``requirements/runtime.txt``,
``--require-hashes --only-binary=:all:``) and the product wheel installed into the
venv ``/opt/elb-gate`` by the image's own Python, assembled by umoci into an OCI
archive that ``ctr -n k8s.io images import`` names ``docker.io/library/elb-gate:<appVersion>``.
A CycloneDX SBOM is written next to it.

Two layers, each a tar written here in a fixed order with fixed owners and
mtimes clamped: the Debian base (cached under ``.build/image/cache`` by its recipe,
clamped to the last commit of that recipe) and the venv (clamped to the last commit
of the image's inputs; SOURCE_DATE_EPOCH overrides both). A second run with nothing
changed finds the archive current and returns at once; a product change rebuilds
only the venv.

Runs as root (chroot, files owned by root). Standard library only: it runs with
the project's venv Python, whose pip (``requirements/build.txt``) fetches the wheels.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / ".build" / "image"
CACHE = OUT / "cache"
CHART = REPO / "charts" / "elb-gate" / "Chart.yaml"

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
DEBIAN_PACKAGES = ("python3", "ca-certificates")
"""What the image asks Debian for; their hard dependencies come along."""
DROPPED_PACKAGES = ("dpkg", "debconf", "tar")
"""Package tooling dragged in by ca-certificates' maintainer scripts, which are never
run here: removed from the root filesystem and absent from the SBOM."""
DROPPED_PATHS = (
    "etc/apt",
    "etc/dpkg",
    "etc/cron.daily",
    "etc/logrotate.d",
    "var/cache",
    "var/log",
    "var/lib/apt",
    "etc/hostname",
    "etc/resolv.conf",
)
"""Package-manager state and host copies the runtime supplies itself."""

PYTHON_MINOR = "3.11"
"""Debian bookworm's python3; the Dockerfile's base is the same Debian release."""
PREFIX = "/opt/elb-gate"
UID = GID = 10001
USER = "elbgate"
PRODUCT = ("elbgate", "client", "webhook", "controller", "certs")
"""The product's packages: what the wheel carries (pyproject's include list)."""
WHEEL_PLATFORMS = tuple(
    f"{tag}_x86_64"
    for tag in (
        "manylinux_2_36",
        "manylinux_2_34",
        "manylinux_2_28",
        "manylinux_2_17",
        "manylinux2014",
        "manylinux_2_5",
        "manylinux1",
    )
)
"""Every manylinux tag bookworm's glibc 2.36 runs, for `pip download --platform`."""
ENV = (
    f"PATH={PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONUNBUFFERED=1",
    "PYTHONDONTWRITEBYTECODE=1",
)
CMD = ("python", "-m", "webhook")
PORTS = ("8443/tcp", "9090/tcp")
LOCKS = ("requirements/runtime.txt", "requirements/build.txt")


def app_version() -> str:
    """``appVersion`` of the chart: the image's tag."""
    found = re.search(r'^appVersion:\s*"?([^"\s]+)"?', CHART.read_text(), flags=re.MULTILINE)
    if not found:
        raise SystemExit(f"no appVersion in {CHART}")
    return found.group(1)


def ref() -> str:
    """The reference a node resolves the chart's default image (``elb-gate:<appVersion>``) to."""
    return f"docker.io/library/elb-gate:{app_version()}"


def archive_path() -> Path:
    return OUT / f"elb-gate-{app_version()}.oci.tar"


def sbom_path() -> Path:
    return OUT / f"elb-gate-{app_version()}.cdx.json"


def _stamp_path() -> Path:
    return OUT / f"elb-gate-{app_version()}.inputs"


def input_files() -> list[Path]:
    """Every file whose content decides the image."""
    files = [
        REPO / "pyproject.toml",
        REPO / "README.md",
        CHART,
        Path(__file__),
        REPO / "image" / "build.sh",
        *(REPO / lock for lock in LOCKS),
    ]
    for package in PRODUCT:
        files += sorted((REPO / package).rglob("*.py"))
    return files


def inputs_digest() -> str:
    """sha256 over the inputs' names and contents and SOURCE_DATE_EPOCH."""
    digest = hashlib.sha256(f"{source_date_epoch()}\n".encode())
    for path in input_files():
        digest.update(f"{path.relative_to(REPO)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def is_current() -> bool:
    """The archive exists and was built from the inputs as they are now."""
    stamp = _stamp_path()
    return (
        archive_path().exists()
        and sbom_path().exists()
        and stamp.exists()
        and stamp.read_text().strip() == inputs_digest()
    )


INPUT_DIRS = (
    "pyproject.toml",
    "README.md",
    "charts/elb-gate/Chart.yaml",
    "image",
    "requirements",
    *PRODUCT,
)
"""What the image is made of, for git: a commit elsewhere leaves the image as it is."""


@functools.cache
def _last_input_commit() -> tuple[int, str]:
    """Time and hash of the last commit that changed the image's inputs ((0, "") outside git)."""
    proc = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct %H", "--", *INPUT_DIRS],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        return 0, ""
    when, commit = proc.stdout.split()
    return int(when), commit


@functools.cache
def base_epoch() -> int:
    """The Debian base's clamp: SOURCE_DATE_EPOCH when set, else the last commit that changed
    its recipe (this file), so a product commit reuses the cached base and a fresh build
    makes the same one."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    proc = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct", "--", "image/build.py"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else 0


def source_date_epoch() -> int:
    """SOURCE_DATE_EPOCH when set, else the time of the last commit that changed the inputs:
    every timestamp in the image (files, config, history, labels) is at most this."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    return _last_input_commit()[0]


def _run(*argv: str | Path, env: dict[str, str] | None = None) -> str:
    program = shutil.which(argv[0]) or argv[0]  # found on our PATH, not the chroot's
    proc = subprocess.run(
        [str(program), *map(str, argv[1:])], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
        )
    return proc.stdout


def _step(message: str) -> None:
    print(f"==> {message}", flush=True)


# --- the Debian base ----------------------------------------------------------


def _base_key() -> str:
    recipe = json.dumps(
        [
            SUITE,
            MIRROR,
            DEBIAN_PACKAGES,
            DROPPED_PACKAGES,
            DROPPED_PATHS,
            UID,
            base_epoch(),
            hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        ]
    )
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def _deb_fields(deb: Path) -> dict[str, str]:
    """A .deb's control paragraph, as dpkg's status database would hold it."""
    text = _run("dpkg-deb", "-f", deb)
    fields: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def _deb_paths(deb: Path) -> list[tuple[str, bool]]:
    """The paths a .deb installs (relative, without ./), each with whether it is a directory."""
    return [
        (
            line.split(" -> ")[0].split(None, 5)[5].removeprefix("./").rstrip("/"),
            line.startswith("d"),
        )
        for line in _run("dpkg-deb", "-c", deb).splitlines()
    ]


def build_base() -> Path:
    """The Debian root filesystem (cached by its recipe); returns its directory, beside
    which ``packages.json`` records what it holds."""
    base = CACHE / f"base-{_base_key()}"
    if (base / "packages.json").exists():
        _step(f"Debian base: cached ({base.name})")
        return base
    shutil.rmtree(base, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="base.", dir=CACHE))
    rootfs, debs = work / "rootfs", work / "debs"
    debs.mkdir()
    _step(f"Debian base: mmdebstrap {SUITE} {' '.join(DEBIAN_PACKAGES)} from {MIRROR}")
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(base_epoch())}
    _run(
        "mmdebstrap",
        "--variant=extract",
        "--mode=root",
        f"--include={','.join(DEBIAN_PACKAGES)}",
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        f'--extract-hook=cp "$1"/var/cache/apt/archives/*.deb {debs}/',
        "--skip=check/qemu",
        SUITE,
        rootfs,
        MIRROR,
        env=env,
    )
    packages = []
    for deb in sorted(debs.glob("*.deb")):
        fields = _deb_fields(deb)
        if fields["Package"] in DROPPED_PACKAGES:
            for rel, is_dir in sorted(_deb_paths(deb), reverse=True):  # files before dirs
                path = rootfs / rel
                if not is_dir and (path.is_symlink() or path.is_file()):
                    path.unlink()
                elif is_dir and not path.is_symlink() and path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
            continue
        packages.append(fields)
    _finish_rootfs(rootfs, packages)
    (work / "packages.json").write_text(json.dumps(packages, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(debs)
    work.rename(base)
    for old in CACHE.glob("base-*"):  # earlier recipes' bases
        if old != base:
            shutil.rmtree(old)
    return base


def _finish_rootfs(rootfs: Path, packages: list[dict[str, str]]) -> None:
    """What the skipped maintainer scripts would have done that the runtime needs, and
    nothing it does not."""
    for rel in DROPPED_PATHS:
        path = rootfs / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    shutil.rmtree(rootfs / "dev")
    for rel, mode in (
        ("dev", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("run", 0o755),
        ("tmp", 0o1777),
    ):
        (rootfs / rel).mkdir(exist_ok=True)
        (rootfs / rel).chmod(mode)
    etc = rootfs / "etc"
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"{USER}:x:{UID}:{GID}:elb-gate:/nonexistent:/usr/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\n{USER}:x:{GID}:\nnogroup:x:65534:\n")
    # update-ca-certificates' result with Debian's default (every Mozilla root enabled).
    mozilla = sorted((rootfs / "usr/share/ca-certificates/mozilla").glob("*.crt"))
    (etc / "ssl/certs/ca-certificates.crt").write_text(
        "".join(path.read_text() for path in mozilla)
    )
    # The package list, where scanners (Trivy, Grype, Syft) read it in distroless
    # images: one control paragraph per package.
    status = rootfs / "var/lib/dpkg/status.d"
    shutil.rmtree(rootfs / "var/lib/dpkg", ignore_errors=True)
    status.mkdir(parents=True)
    for fields in packages:
        paragraph = {**fields, "Status": "install ok installed"}
        (status / fields["Package"]).write_text(
            "".join(f"{k}: {v}\n" for k, v in paragraph.items())
        )
    # The standard library compiled once here: the root filesystem is read-only at
    # run time. SOURCE_DATE_EPOCH makes them hash-checked .pyc files (reproducible).
    env = {"PATH": "/usr/bin", "SOURCE_DATE_EPOCH": str(base_epoch())}
    _run(
        "chroot",
        rootfs,
        "/usr/bin/python3",
        "-m",
        "compileall",
        "-q",
        f"/usr/lib/python{PYTHON_MINOR}",
        env=env,
    )


# --- the venv -----------------------------------------------------------------


def fetch_wheels() -> Path:
    """The locked wheels for the image's platform, checked against the lock's hashes."""
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    _step(
        "wheels: pip download --require-hashes --only-binary=:all: (cached in .build/image/cache)"
    )
    platforms = [arg for tag in WHEEL_PLATFORMS for arg in ("--platform", tag)]
    _run(
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        "--require-hashes",
        "--only-binary=:all:",
        *platforms,
        "--python-version",
        PYTHON_MINOR,
        "--implementation",
        "cp",
        "--abi",
        f"cp{PYTHON_MINOR.replace('.', '')}",
        "--abi",
        "abi3",
        "--abi",
        "none",
        "-r",
        REPO / "requirements/runtime.txt",
        "-r",
        REPO / "requirements/build.txt",
        "-d",
        wheels,
    )
    return wheels


def build_product_wheel(into: Path) -> Path:
    """The product's wheel, built from a copy of exactly what it ships (no build/ or
    egg-info left in the repository), with the locked setuptools."""
    with tempfile.TemporaryDirectory(prefix="src.", dir=CACHE) as src:
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / name, Path(src) / name)
        # The modules input_files() hashes and nothing else (no certs/out keys, no caches).
        for package in PRODUCT:
            for module in sorted((REPO / package).rglob("*.py")):
                copy = Path(src) / module.relative_to(REPO)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(module, copy)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(source_date_epoch())}
        _run(
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            into,
            src,
            env=env,
        )
    (wheel,) = into.glob("elb_gate-*.whl")
    return wheel


def build_venv(base: Path, wheels: Path, work: Path) -> Path:
    """Base + the venv, made by the image's own Python in a chroot; returns the rootfs."""
    rootfs = work / "rootfs"
    _run("cp", "-a", base / "rootfs", rootfs)
    staged = rootfs / "tmp/wheels"
    staged.mkdir()
    for wheel in wheels.glob("*.whl"):
        shutil.copy2(wheel, staged)
    shutil.copy2(REPO / "requirements/runtime.txt", staged / "runtime.txt")
    (work / "product").mkdir()
    product = build_product_wheel(work / "product")
    shutil.copy2(product, staged)
    (pip,) = staged.glob("pip-*.whl")
    env = {
        "PATH": "/usr/bin",
        "HOME": "/nonexistent",
        "LC_ALL": "C.UTF-8",
        "SOURCE_DATE_EPOCH": str(source_date_epoch()),
        "PYTHONHASHSEED": "0",
    }
    _step(f"venv: {PREFIX} with the image's python3, the locked wheels and {product.name}")
    _run("chroot", rootfs, "/usr/bin/python3", "-m", "venv", "--without-pip", PREFIX, env=env)
    pip_run = (
        "chroot",
        rootfs,
        f"{PREFIX}/bin/python",
        f"/tmp/wheels/{pip.name}/pip",
        "install",
        "-q",
        "--no-index",
        "--find-links",
        "/tmp/wheels",
        "--only-binary=:all:",
        "--no-cache-dir",
        "--disable-pip-version-check",
    )
    _run(*pip_run, "--require-hashes", "-r", "/tmp/wheels/runtime.txt", env=env)
    _run(*pip_run, "--no-deps", f"/tmp/wheels/{product.name}", env=env)
    shutil.rmtree(staged)
    return rootfs


# --- layers and the archive ---------------------------------------------------


def _walk(root: Path, top: str) -> Iterator[str]:
    """``top`` and everything under it, relative to ``root``, in a fixed order."""
    yield top
    start = root / top
    if start.is_dir() and not start.is_symlink():
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames.sort()
            rel = Path(dirpath).relative_to(root)
            for name in sorted(dirnames + filenames):
                yield str(rel / name)


def write_layer(root: Path, tops: list[str], out: Path, epoch: int) -> None:
    """A tar of ``tops`` under ``root``: sorted, owners numeric, mtimes clamped to ``epoch``."""

    def normal(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = min(int(info.mtime), epoch)
        info.uname = info.gname = ""
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for top in tops:
            for rel in _walk(root, top):
                tar.add(root / rel, arcname=rel, recursive=False, filter=normal)


def _iso(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _revision() -> str:
    return _last_input_commit()[1]


def labels() -> dict[str, str]:
    chart = CHART.read_text()
    source = re.search(r"^home:\s*(\S+)", chart, flags=re.MULTILINE)
    return {
        "org.opencontainers.image.title": "elb-gate",
        "org.opencontainers.image.description": "elb-gate admission webhook and controller "
        "(python -m webhook | python -m controller) and the elb-gate CLI",
        "org.opencontainers.image.version": app_version(),
        "org.opencontainers.image.created": _iso(source_date_epoch()),
        "org.opencontainers.image.revision": _revision(),
        "org.opencontainers.image.source": source.group(1) if source else "",
        "org.opencontainers.image.licenses": "MIT",
        "org.opencontainers.image.vendor": "elb-gate",
    }


def assemble(base_tar: Path, app_tar: Path, out: Path) -> None:
    """The OCI layout by umoci, then the archive: index annotated with the ref containerd names
    the image by (io.containerd.image.name) and the tag (org.opencontainers.image.ref.name)."""
    created = _iso(source_date_epoch())
    tag = app_version()
    with tempfile.TemporaryDirectory(prefix="layout.", dir=CACHE) as tmp:
        layout = Path(tmp) / "oci"
        image = f"{layout}:{tag}"
        _run("umoci", "init", "--layout", layout)
        _run("umoci", "new", "--image", image)
        for layer, what in (
            (base_tar, f"Debian {SUITE}: {' '.join(DEBIAN_PACKAGES)}"),
            (app_tar, f"{PREFIX}: requirements/runtime.txt + elb-gate"),
        ):
            _run(
                "umoci",
                "raw",
                "add-layer",
                "--image",
                image,
                "--history.created",
                created,
                "--history.created_by",
                what,
                layer,
            )
        config = [
            "--created",
            created,
            "--author",
            "elb-gate",
            "--architecture",
            "amd64",
            "--os",
            "linux",
            "--config.user",
            f"{UID}:{GID}",
            "--config.workingdir",
            "/",
            "--no-history",
        ]
        for env in ENV:
            config += ["--config.env", env]
        for arg in CMD:
            config += ["--config.cmd", arg]
        for port in PORTS:
            config += ["--config.exposedports", port]
        for key, value in labels().items():
            config += ["--config.label", f"{key}={value}"]
        _run("umoci", "config", "--image", image, *config)
        _run("umoci", "gc", "--layout", layout)
        index = json.loads((layout / "index.json").read_text())
        (manifest,) = index["manifests"]
        manifest["annotations"] = {
            "io.containerd.image.name": ref(),
            "org.opencontainers.image.ref.name": tag,
        }
        (layout / "index.json").write_text(json.dumps(index, sort_keys=True))
        write_layer(layout, sorted(p.name for p in layout.iterdir()), out, source_date_epoch())


# --- the SBOM -----------------------------------------------------------------


def _python_components(rootfs: Path, wheels: list[Path]) -> list[dict[str, object]]:
    """One component per distribution installed in the venv, with the sha256 of the wheel
    it came from (one of the lock's hashes; the product's own wheel is built here)."""
    site = rootfs / PREFIX.lstrip("/") / f"lib/python{PYTHON_MINOR}/site-packages"
    by_name = {}
    for wheel in (w for d in wheels for w in d.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        by_name[(name.lower().replace("_", "-"), version)] = hashlib.sha256(wheel.read_bytes())
    components = []
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        headers = dict(
            line.split(": ", 1)
            for line in meta.read_text().split("\n\n")[0].splitlines()
            if ": " in line and not line.startswith(" ")
        )
        name, version = headers["Name"], headers["Version"]
        key = (re.sub(r"[-_.]+", "-", name).lower(), version)
        component: dict[str, object] = {
            "type": "library" if key[0] != "elb-gate" else "application",
            "bom-ref": f"pkg:pypi/{key[0]}@{version}",
            "name": name,
            "version": version,
            "purl": f"pkg:pypi/{key[0]}@{version}",
        }
        digest = by_name.get(key)
        if digest is not None:
            component["hashes"] = [{"alg": "SHA-256", "content": digest.hexdigest()}]
        if headers.get("License-Expression"):
            component["licenses"] = [{"expression": headers["License-Expression"]}]
        components.append(component)
    return components


def _debian_components(packages: list[dict[str, str]]) -> list[dict[str, object]]:
    components: list[dict[str, object]] = []
    for fields in sorted(packages, key=lambda f: f["Package"]):
        name, version, arch = fields["Package"], fields["Version"], fields["Architecture"]
        purl = f"pkg:deb/debian/{name}@{version}?arch={arch}&distro=debian-12"
        components.append(
            {
                "type": "library",
                "bom-ref": purl,
                "name": name,
                "version": version,
                "purl": purl,
                "properties": [{"name": "debian:source", "value": fields.get("Source", name)}],
            }
        )
    return components


def write_sbom(
    packages: list[dict[str, str]], rootfs: Path, wheels: list[Path], archive: Path, out: Path
) -> dict[str, int]:
    """CycloneDX 1.5 JSON: the Debian packages (from their control files) and the Python
    distributions (from the venv's metadata) with versions and hashes."""
    debian = _debian_components(packages)
    python = _python_components(rootfs, wheels)
    index = json.loads(_oci_file(archive, "index.json"))
    digest = index["manifests"][0]["digest"]
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": "urn:uuid:" + _uuid_from(digest),
        "version": 1,
        "metadata": {
            "timestamp": _iso(source_date_epoch()),
            "tools": {
                "components": [
                    {"type": "application", "name": "image/build.py", "version": app_version()}
                ]
            },
            "component": {
                "type": "container",
                "bom-ref": ref(),
                "name": "elb-gate",
                "version": app_version(),
                "hashes": [{"alg": "SHA-256", "content": digest.removeprefix("sha256:")}],
            },
        },
        "components": debian + python,
    }
    out.write_text(json.dumps(bom, indent=1) + "\n")
    return {"debian": len(debian), "python": len(python)}


def _uuid_from(digest: str) -> str:
    h = digest.removeprefix("sha256:")
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def _oci_file(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read()


# --- main ---------------------------------------------------------------------


def build(force: bool = False) -> Path:
    """Build the archive and SBOM unless they are current; returns the archive's path.
    Concurrent builds (two test runs) take turns: the second finds the first's result."""
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(force)


def _build_locked(force: bool) -> Path:
    archive = archive_path()
    if not force and is_current():
        _step(f"{archive.relative_to(REPO)} is current ({ref()})")
        return archive
    if os.geteuid() != 0:
        raise SystemExit("make image runs as root (chroot, root-owned files): sudo make image")
    for tool in ("mmdebstrap", "umoci", "dpkg-deb", "chroot"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: bash .ci/install-tools installs it")
    started = time.monotonic()
    CACHE.mkdir(parents=True, exist_ok=True)
    base = build_base()
    packages = json.loads((base / "packages.json").read_text())
    wheels = fetch_wheels()
    with tempfile.TemporaryDirectory(prefix="work.", dir=CACHE) as tmp:
        work = Path(tmp)
        rootfs = build_venv(base, wheels, work)
        _step("layers: Debian base, then the venv")
        base_tar, app_tar = work / "base.tar", work / "app.tar"
        base_top = sorted(p.name for p in (base / "rootfs").iterdir())
        write_layer(base / "rootfs", base_top, base_tar, base_epoch())
        write_layer(rootfs, ["opt"], app_tar, source_date_epoch())
        _step(f"umoci: {archive.relative_to(REPO)} as {ref()}")
        partial = archive.with_suffix(".partial")
        assemble(base_tar, app_tar, partial)
        partial.rename(archive)
        counts = write_sbom(packages, rootfs, [wheels, work / "product"], archive, sbom_path())
    _stamp_path().write_text(inputs_digest() + "\n")
    _step(
        f"done in {time.monotonic() - started:.0f} s: {archive.stat().st_size / 1e6:.1f} MB; "
        f"SBOM {sbom_path().name}: {counts['debian']} Debian, {counts['python']} Python packages"
    )
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="image/build.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when current")
    parser.add_argument("--print-ref", action="store_true", help="print the image reference")
    parser.add_argument("--print-archive", action="store_true", help="print the archive's path")
    args = parser.parse_args(argv)
    if args.print_ref:
        print(ref())
    elif args.print_archive:
        print(archive_path())
    else:
        build(force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
