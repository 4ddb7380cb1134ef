"""The image `make image` builds, opened and run: it is what the Dockerfile describes
(same Python minor, uid/gid, entry points, exactly the locked packages, no test bed),
its entry points run under runc as uid 10001 with a read-only root, and its SBOM
lists what is inside.

Building needs root (chroot, root-owned files) and mmdebstrap + umoci, running
needs runc: CI runs as root with them installed (.ci/install-tools); elsewhere
these tests skip and say which of those is missing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from image import build
from testbed import image as testbed_image
from testbed.waiting import wait_until
from tests.install.image_contents import (
    PYTHON_OF_DEBIAN,
    Image,
    dockerfile_final,
    lock_pins,
    open_archive,
)
from tests.install.rendering import REPO

pytestmark = pytest.mark.image

SITE = f"opt/elb-gate/lib/python{build.PYTHON_MINOR}/site-packages"


@pytest.fixture(scope="module")
def archive() -> Path:
    try:
        return testbed_image.ensure_image()
    except testbed_image.ImageUnavailable as unavailable:
        if os.geteuid() == 0:  # as CI runs: the build must work, not be skipped
            pytest.fail(f"cannot build the image: {unavailable}")
        pytest.skip(f"cannot build the image here: {unavailable}")


@pytest.fixture(scope="module")
def image(archive: Path) -> Image:
    return open_archive(archive)


def _distributions(image: Image) -> dict[str, str]:
    found = {}
    for name, data in image.contents.items():
        if name.startswith(SITE) and name.endswith(".dist-info/METADATA"):
            meta = dict(re.findall(r"^(Name|Version): (.+)$", data.decode(), flags=re.MULTILINE))
            found[re.sub(r"[-_.]+", "-", meta["Name"]).lower()] = meta["Version"]
    return found


def test_containerd_names_it_the_charts_default_image(image: Image) -> None:
    (entry,) = image.index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == testbed_image.REF
    assert testbed_image.REF == f"docker.io/library/elb-gate:{build.app_version()}"
    values = (REPO / "charts/elb-gate/values.yaml").read_text()
    assert re.search(r"^  repository: elb-gate$", values, flags=re.MULTILINE)
    assert re.search(r"^  pullPolicy: IfNotPresent$", values, flags=re.MULTILINE)


def test_the_config_is_the_dockerfiles(image: Image) -> None:
    final = dockerfile_final((REPO / "Dockerfile").read_text())
    config = image.config["config"]
    assert config["User"] == final.user
    assert config["Cmd"] == final.cmd
    assert sorted(config["ExposedPorts"]) == final.ports
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].split(":")[0] == final.env["PATH"].split(":")[0] == "/opt/elb-gate/bin"
    assert {k: env[k] for k in final.env if k != "PATH"} == {
        k: v for k, v in final.env.items() if k != "PATH"
    }
    assert config["Labels"]["org.opencontainers.image.version"] == build.app_version()
    assert image.config["architecture"] == "amd64" and image.config["os"] == "linux"


def test_the_user_and_the_python_are_the_dockerfiles(image: Image) -> None:
    final = dockerfile_final((REPO / "Dockerfile").read_text())
    passwd = image.read("etc/passwd").decode()
    group = image.read("etc/group").decode()
    uid, gid = final.ids
    assert re.search(rf"^elbgate:x:{uid}:{gid}:", passwd, flags=re.MULTILINE), passwd
    assert re.search(rf"^elbgate:x:{gid}:", group, flags=re.MULTILINE), group
    debian = re.search(r"^ARG DEBIAN_IMAGE=debian:(\w+)-", (REPO / "Dockerfile").read_text(), re.M)
    assert debian
    minor = PYTHON_OF_DEBIAN[debian.group(1)]
    cfg = image.read("opt/elb-gate/pyvenv.cfg").decode()
    assert re.search(rf"^version = {re.escape(minor)}\.\d+$", cfg, flags=re.MULTILINE), cfg
    pythons = {m.group(1) for n in image.files if (m := re.match(r"usr/lib/python(3\.\d+)$", n))}
    assert pythons == {minor}


def test_it_holds_exactly_the_locked_packages_and_the_product(image: Image) -> None:
    locked = {n: v for n, (v, _) in lock_pins(REPO / "requirements/runtime.txt").items()}
    assert _distributions(image) == {**locked, "elb-gate": build.app_version()}
    top = {n.split("/")[len(SITE.split("/"))] for n in image.files if n.startswith(SITE + "/")}
    for package in build.PRODUCT:
        assert package in top
    assert not {"testbed", "tests", "bench", "image", "manifests", "pip", "setuptools"} & top
    assert "opt/elb-gate/bin/elb-gate" in image.files


def test_no_package_tooling_is_left(image: Image) -> None:
    for tool in ("usr/bin/dpkg", "usr/bin/apt", "usr/bin/apt-get", "usr/bin/perl", "usr/bin/tar"):
        assert tool not in image.files
    status = {n.rsplit("/", 1)[1] for n in image.contents if n.startswith("var/lib/dpkg/status.d/")}
    assert {"python3", "ca-certificates", "libc6"} <= status
    assert not set(build.DROPPED_PACKAGES) & status


def test_the_sbom_lists_every_package_with_its_version_and_the_wheels_hash(image: Image) -> None:
    bom = json.loads(testbed_image.sbom_path().read_text())
    assert bom["bomFormat"] == "CycloneDX"
    (entry,) = image.index["manifests"]
    assert bom["metadata"]["component"]["hashes"][0]["content"] == entry["digest"].split(":")[1]
    debs = {c["name"]: c["version"] for c in bom["components"] if c["purl"].startswith("pkg:deb/")}
    status = {}
    for name, data in image.contents.items():
        if name.startswith("var/lib/dpkg/status.d/"):
            fields = dict(re.findall(r"^(Package|Version): (.+)$", data.decode(), flags=re.M))
            status[fields["Package"]] = fields["Version"]
    assert debs == status
    pins = lock_pins(REPO / "requirements/runtime.txt")
    wheels = {c["name"]: c for c in bom["components"] if c["purl"].startswith("pkg:pypi/")}
    assert {re.sub(r"[-_.]+", "-", n).lower(): c["version"] for n, c in wheels.items()} == (
        _distributions(image)
    )
    for name, component in wheels.items():
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key != "elb-gate":
            assert component["hashes"][0]["content"] in pins[key][1], name


@pytest.fixture(scope="module")
def bundle(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image unpacked by umoci into a runtime bundle (config.json from the image's config)."""
    if os.geteuid() != 0:
        pytest.skip("running the image under runc needs root; CI runs as root")
    if shutil.which("runc") is None:
        pytest.fail("runc not installed: bash .ci/install-tools installs it")
    work = tmp_path_factory.mktemp("bundle")
    layout = work / "oci"
    layout.mkdir()
    subprocess.run(["tar", "-C", str(layout), "-xf", str(archive)], check=True)
    subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{build.app_version()}", str(work / "bundle")],
        check=True,
        capture_output=True,
    )
    return work / "bundle"


def _run_in(bundle: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``args`` in a runc container from the image's own config, with a read-only root
    (and runc's default namespaces: no network but loopback)."""
    config = json.loads((bundle / "config.json").read_text())
    config["root"]["readonly"] = True
    config["process"]["terminal"] = False
    config["process"]["args"] = args
    (bundle / "config.json").write_text(json.dumps(config))
    return subprocess.run(
        ["runc", "run", "--bundle", str(bundle), f"elb-gate-image-test-{uuid.uuid4().hex[:8]}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["python", "-m", "webhook", "--help"], "usage: python -m webhook"),
        (["python", "-m", "controller", "--help"], "usage: python -m controller"),
        (["elb-gate", "--help"], "usage: elb-gate"),
    ],
)
def test_the_entry_points_run_as_10001_on_a_read_only_root(
    bundle: Path, args: list[str], usage: str
) -> None:
    proc = _run_in(bundle, args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(usage), proc.stdout


def test_the_process_is_10001_and_cannot_write_its_root(bundle: Path) -> None:
    probe = (
        "import os, ssl\n"
        "print(os.getuid(), os.getgid())\n"
        "print(ssl.create_default_context().cert_store_stats()['x509_ca'] > 100)\n"
        "try:\n"
        "    open('/opt/elb-gate/x', 'w')\n"
        "except OSError as e:\n"
        "    print(e.strerror)\n"
    )
    proc = _run_in(bundle, ["python", "-c", probe])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["10001 10001", "True", "Read-only file system"]


def test_containerd_imports_it_under_the_reference_the_chart_pulls(
    archive: Path, image: Image, tmp_path: Path
) -> None:
    """`ctr -n k8s.io images import` into a containerd of its own (own root, state and
    socket; no CRI), as a node of the system tier loads it."""
    if os.geteuid() != 0:
        pytest.skip("a containerd of the test's own needs root; CI runs as root")
    if shutil.which("containerd") is None or shutil.which("ctr") is None:
        pytest.fail("containerd not installed: bash .ci/install-tools installs it")
    sock = tmp_path / "containerd.sock"
    (tmp_path / "config.toml").write_text(
        "version = 2\n"
        f'root = "{tmp_path / "root"}"\nstate = "{tmp_path / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{sock}"\n[ttrpc]\n  address = "{sock}.ttrpc"\n'
        '[debug]\n  address = ""\n[metrics]\n  address = ""\n'
    )
    log = (tmp_path / "containerd.log").open("w")
    daemon = subprocess.Popen(
        ["containerd", "--config", str(tmp_path / "config.toml")], stdout=log, stderr=log
    )
    try:
        ctr = ["ctr", "--address", str(sock), "-n", "k8s.io"]
        wait_until(
            lambda: subprocess.run([*ctr, "version"], capture_output=True).returncode == 0,
            timeout=60,
            what="the test's containerd answers",
            detail=lambda: (tmp_path / "containerd.log").read_text()[-2000:],
        )
        imported = subprocess.run(
            [*ctr, "images", "import", str(archive)], capture_output=True, text=True, timeout=300
        )
        assert imported.returncode == 0, imported.stderr
        listed = subprocess.run(
            [*ctr, "images", "ls"], capture_output=True, text=True, check=True
        ).stdout
        (entry,) = image.index["manifests"]
        rows = [line.split() for line in listed.splitlines()[1:]]
        assert [(r[0], r[2], r[-2]) for r in rows] == [
            (testbed_image.REF, entry["digest"], "linux/amd64")
        ], listed
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        log.close()
