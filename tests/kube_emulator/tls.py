"""The emulator's CA, serving certificate and kubeconfig files."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import trustme
import yaml

from .users import User


class ServingCerts:
    """A private CA and a certificate for 127.0.0.1/localhost, written under `directory`."""

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA(organization_name="kube-emulator")
        self.cert = self.ca.issue_cert("127.0.0.1", "localhost", "kubernetes.default.svc")
        self.ca_file = directory / "ca.crt"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem.bytes()

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self.cert.configure_cert(ctx)
        return ctx


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, user: User,
                     namespace: str = "default") -> Path:
    """A kubeconfig with one cluster, one user (bearer token) and one current context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode(),
        }}],
        "users": [{"name": user.name, "user": {"token": user.token}}],
        "contexts": [{"name": f"{user.name}@emulator", "context": {
            "cluster": "emulator", "user": user.name, "namespace": namespace,
        }}],
        "current-context": f"{user.name}@emulator",
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
