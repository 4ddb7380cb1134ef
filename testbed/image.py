"""The product's OCI image for tests that run it as installed (`make image`).

``ensure_image()`` returns the archive ``ctr -n k8s.io images import`` loads, building
it first (``image/build.sh``: root, mmdebstrap, umoci) when it is missing or older
than its inputs; ``REF`` is the name containerd gives it, the chart's default image
(repository ``elb-gate``, tag appVersion) as a node resolves it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from image import build

REF = build.ref()
"""``docker.io/library/elb-gate:<appVersion>``."""
sbom_path = build.sbom_path
"""The CycloneDX SBOM written with the archive."""


class ImageUnavailable(RuntimeError):
    """The image cannot be built here; the message says what is missing."""


def why_unbuildable() -> str | None:
    """Why this machine cannot build the image, or None when it can."""
    if os.geteuid() != 0:
        return "building the image needs root (chroot, root-owned files); CI runs as root"
    missing = [t for t in ("mmdebstrap", "umoci", "dpkg-deb") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed: bash .ci/install-tools installs them"
    return None


def ensure_image() -> Path:
    """The OCI archive, current with its inputs (the locks, the product's sources,
    the build script); built when missing or stale. Raises ImageUnavailable when it
    must be built and cannot be here."""
    if build.is_current():
        return build.archive_path()
    reason = why_unbuildable()
    if reason is not None:
        raise ImageUnavailable(reason)
    proc = subprocess.run(
        ["bash", str(build.REPO / "image" / "build.sh")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not build.is_current():
        raise RuntimeError(
            f"image/build.sh failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return build.archive_path()
