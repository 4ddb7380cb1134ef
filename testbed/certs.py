"""Serving certificates for the testbed, written the way a mounted Secret is (``..data`` swap)."""

from __future__ import annotations

import base64
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import trustme
from cryptography import x509

WEBHOOK_HOST = "elb-gate-webhook.elb-system.svc"
"""What the API server verifies for a Service reference: ``<service>.<namespace>.svc``."""
LOOPBACK = "127.0.0.1"
"""What it verifies for the ``url:`` the testbed registers (the host of the URL)."""


class MountedCertificate:
    """A private CA and a serving certificate in ``directory/tls.crt`` and
    ``directory/tls.key``, each a symlink through ``..data`` to a timestamped
    directory, exactly as the kubelet lays out a Secret volume. :meth:`rotate`
    swaps ``..data`` atomically, as the kubelet does when the Secret changes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = trustme.CA(organization_name="elb-gate tests")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._generation = 0
        self.serial = 0
        self.not_after = datetime.now(UTC)
        self.rotate()

    @property
    def cert_file(self) -> str:
        return str(self.directory / "tls.crt")

    @property
    def key_file(self) -> str:
        return str(self.directory / "tls.key")

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem.bytes()

    @property
    def ca_bundle(self) -> str:
        """``caBundle`` of a webhook clientConfig (base64 PEM)."""
        return base64.b64encode(self.ca_pem).decode()

    def rotate(self, valid_for: timedelta = timedelta(days=30)) -> int:
        """Issue a new certificate (new serial, notAfter now + ``valid_for``) and swap it in;
        returns its serial."""
        self._generation += 1
        not_after = (datetime.now(UTC) + valid_for).replace(microsecond=0)
        leaf = self.ca.issue_cert(WEBHOOK_HOST, LOOPBACK, not_after=not_after)
        generation = self.directory / f"..gen_{self._generation:04d}"
        generation.mkdir()
        (generation / "tls.crt").write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
        (generation / "tls.key").write_bytes(leaf.private_key_pem.bytes())
        data, tmp_link = self.directory / "..data", self.directory / "..data_tmp"
        previous = data.resolve() if data.exists() else None
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(generation.name)
        os.replace(tmp_link, data)
        for name in ("tls.crt", "tls.key"):
            link = self.directory / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
        if previous is not None:  # every generation is a new directory
            shutil.rmtree(previous, ignore_errors=True)
        cert = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes())
        self.serial, self.not_after = cert.serial_number, cert.not_valid_after_utc
        return self.serial
