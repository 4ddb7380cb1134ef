"""The certificate material on disk (``certs/out/``, git-ignored).

Layout: ``ca.crt``/``ca.key`` (the CA), ``tls.crt``/``tls.key`` (the webhook's
serving pair) and, after a CA rotation, ``ca-previous.crt`` (still trusted in
the caBundle until it expires). Keys are written 0600 and every file is
replaced atomically, so an interrupted run never leaves a half-written key.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from certs.builder import KeyPair

CA_CERT, CA_KEY = "ca.crt", "ca.key"
TLS_CERT, TLS_KEY = "tls.crt", "tls.key"
PREVIOUS_CA = "ca-previous.crt"


@dataclass(frozen=True)
class Material:
    """What ``certs/out`` holds; any part may be missing."""

    ca: KeyPair | None
    serving: KeyPair | None
    previous_ca: x509.Certificate | None


def load(out_dir: Path) -> Material:
    """Read ``out_dir``; a missing pair is ``None``, a corrupt one raises ``ValueError``."""
    return Material(
        ca=_pair(out_dir, CA_CERT, CA_KEY),
        serving=_pair(out_dir, TLS_CERT, TLS_KEY),
        previous_ca=(
            x509.load_pem_x509_certificate((out_dir / PREVIOUS_CA).read_bytes())
            if (out_dir / PREVIOUS_CA).exists()
            else None
        ),
    )


def save(out_dir: Path, material: Material) -> None:
    """Write every present part of ``material`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if material.ca is not None:
        write_atomic(out_dir / CA_CERT, material.ca.cert_pem(), 0o644)
        write_atomic(out_dir / CA_KEY, material.ca.key_pem(), 0o600)
    if material.serving is not None:
        write_atomic(out_dir / TLS_CERT, material.serving.cert_pem(), 0o644)
        write_atomic(out_dir / TLS_KEY, material.serving.key_pem(), 0o600)
    if material.previous_ca is not None:
        pem = material.previous_ca.public_bytes(Encoding.PEM)
        write_atomic(out_dir / PREVIOUS_CA, pem, 0o644)
    else:
        (out_dir / PREVIOUS_CA).unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` with ``data`` (created with ``mode`` before any byte is written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _pair(out_dir: Path, cert_name: str, key_name: str) -> KeyPair | None:
    cert, key = out_dir / cert_name, out_dir / key_name
    if not cert.exists() or not key.exists():
        return None
    return KeyPair.from_pem(cert.read_bytes(), key.read_bytes())
