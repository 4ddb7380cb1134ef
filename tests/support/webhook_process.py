"""Run the real ``python -m webhook`` against the API emulator, wired as a cluster would wire it.

    with WebhookProcess(emu) as hook:          # certs, env, free ports, /readyz, configurations
        ns = hook.gate_namespace("team-a")      # labelled elb-gate.io/gated=true
        kubectl(emu, "bob", "create", "-f", "-", input=finalizer_yaml)

The configurations are the ones in manifests/base/admission-webhooks.yaml, with
caBundle patched in; ``emu.services`` maps the Service elb-system/elb-gate-webhook
to the process, and the emulator verifies the certificate against
``elb-gate-webhook.elb-system.svc`` as an apiserver does. Used by the webhook,
demo and reliability suites.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.kube_emulator import Emulator, User
from tests.support.certs import MountedCertificate

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "manifests" / "base" / "admission-webhooks.yaml"
SERVICE = ("elb-system", "elb-gate-webhook")
WEBHOOK_USER = "elb-gate-webhook"
"""Emulator user the process authenticates as (SA elb-system/elb-gate-webhook)."""
GATED_LABEL = "elb-gate.io/gated"


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load_configurations(ca_bundle: str) -> list[dict[str, Any]]:
    """The webhook configurations from the manifest, caBundle filled in."""
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    for doc in docs:
        for hook in doc.get("webhooks") or []:
            hook["clientConfig"]["caBundle"] = ca_bundle
    return docs


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


class WebhookProcess:
    """The webhook as a child process, registered with ``emu``; a context manager."""

    def __init__(
        self,
        emu: Emulator,
        env: Mapping[str, str] | None = None,
        *,
        workdir: Path | None = None,
        register: bool = True,
        namespaces: Iterable[str] = (),
    ) -> None:
        """``env`` adds to/overrides the process environment; ``namespaces`` are
        created if needed and labelled gated when the process is registered."""
        self.emu = emu
        self.namespaces = tuple(namespaces)
        self.extra_env = dict(env or {})
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="elb-gate-webhook-"))
        self.certificate = MountedCertificate(self.workdir / "tls")
        self.port = 0
        self.metrics_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._register = register
        self._registered: list[tuple[str, str]] = []
        self.log_file = self.workdir / "webhook.log"
        if WEBHOOK_USER not in emu.users:
            emu.add_user(User.service_account(*SERVICE))

    # -- lifecycle ---------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The process environment: this repo's settings keys, never in-cluster config."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(("ELB_GATE_", "BLAST_"))}
        base.pop("KUBERNETES_SERVICE_HOST", None)
        base.update(
            {
                "KUBECONFIG": self.emu.kubeconfig(WEBHOOK_USER),
                "ELB_GATE_WEBHOOK_PORT": str(self.port),
                "ELB_GATE_METRICS_PORT": str(self.metrics_port),
                "ELB_GATE_BIND_ADDRESS": "127.0.0.1",
                "ELB_GATE_TLS_CERT_FILE": self.certificate.cert_file,
                "ELB_GATE_TLS_KEY_FILE": self.certificate.key_file,
                "ELB_GATE_LOG_FORMAT": "json",
                "PYTHONUNBUFFERED": "1",
            }
        )
        base.update(self.extra_env)
        return base

    def start(self, timeout: float = 60.0) -> WebhookProcess:
        """Start, wait for ``/readyz``, then register the configurations. Retries once
        if a chosen port was taken in between."""
        for attempt in range(3):
            self.port, self.metrics_port = free_port(), free_port()
            with open(self.log_file, "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "webhook"],
                    cwd=REPO,
                    env=self.env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                wait_until(self._ready, timeout, "the webhook's /readyz")
                break
            except AssertionError:
                self._terminate()
                if attempt == 2 or "address already in use" not in self.log():
                    raise AssertionError(
                        f"webhook did not become ready:\n{self.log()[-4000:]}"
                    ) from None
        if self._register:
            self.register()
            for namespace in self.namespaces:
                self.gate_namespace(namespace)
        return self

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            return False  # exited: start() reports it (with the log)
        try:
            with urllib.request.urlopen(f"{self.metrics_url}/readyz", timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> int | None:
        """Unregister, SIGTERM, wait; returns the exit code (0 when it stopped cleanly)."""
        if self._register:
            self.unregister()
        code = self._terminate()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return code

    def _terminate(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        code = self.process.returncode
        self.process = None
        return code

    def __enter__(self) -> WebhookProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- cluster wiring ----------------------------------------------------------------

    def register(self) -> None:
        """Map the Service to this process and store both webhook configurations."""
        self.emu.services[SERVICE] = ("127.0.0.1", self.port)
        for doc in load_configurations(self.certificate.ca_bundle):
            resource = doc["kind"].lower() + "s"
            name = doc["metadata"]["name"]
            existing = self.emu.find(resource, None, name)
            if existing is None:
                self.emu.create(doc)
            else:
                doc["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                self.emu.update(doc)
            if (resource, name) not in self._registered:
                self._registered.append((resource, name))

    def unregister(self) -> None:
        """Remove the configurations and the Service mapping (the emulator admits freely again)."""
        for resource, name in self._registered:
            if self.emu.find(resource, None, name) is not None:
                self.emu.delete(resource, None, name)
        self._registered.clear()
        self.emu.services.pop(SERVICE, None)

    def gate_namespace(self, namespace: str) -> str:
        """Create ``namespace`` if needed and label it gated; returns its name."""
        existing = self.emu.find("namespaces", None, namespace)
        if existing is None:
            self.emu.create(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace, "labels": {GATED_LABEL: "true"}},
                }
            )
        else:

            def label(obj: dict[str, Any]) -> None:
                obj["metadata"].setdefault("labels", {})[GATED_LABEL] = "true"

            self.emu.patch("namespaces", None, namespace, label)
        return namespace

    # -- observation -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def log(self) -> str:
        """Everything the process wrote so far."""
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def metrics(self) -> str:
        """The ``/metrics`` text."""
        with urllib.request.urlopen(f"{self.metrics_url}/metrics", timeout=10) as resp:
            return str(resp.read().decode())

    def client_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts this process's CA (for direct HTTPS calls)."""
        ctx = ssl.create_default_context(cadata=self.certificate.ca_pem.decode())
        return ctx

    def configurations(self) -> list[dict[str, Any]]:
        """What is registered (copies)."""
        return [
            copy.deepcopy(self.emu.get(resource, None, name)) for resource, name in self._registered
        ]
