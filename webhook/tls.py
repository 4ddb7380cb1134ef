"""The serving certificate: TLS 1.2+, loaded from files, reloaded when they change.

A mounted Secret rotates in place (Kubernetes swaps a ``..data`` symlink), so
the files are polled: each poll reads the resolved cert and key, and when their
bytes differ from what is loaded, the pair is validated (both parse, the key
matches the certificate) before it is loaded into the *same* SSLContext the
server listens with — new handshakes present the new certificate, open
connections keep theirs, nothing restarts. A half-rotated pair (cert written,
key not yet) fails validation and is retried at the next poll; the old pair
stays in service meanwhile.

With ``ELB_GATE_CLIENT_AUTH`` verify or require, the same context asks each
caller for a client certificate and verifies it against ``ELB_GATE_CLIENT_CA_FILE``
(read once, at start-up): optional or required at the handshake
(:mod:`webhook.callers` reads what was verified).

With ``ELB_GATE_TLS_SECRET`` (managed certificates) the pair is read from that Secret
through the API on the same poll instead (:func:`secret_fetcher`): a renewed pair is
served within seconds of its write, with no wait for the kubelet to refresh a volume,
and a Pod starts before the Secret exists (it is Ready once the pair is loaded).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from elbgate.kube.api import SECRETS, KubeApi, path
from elbgate.logs import log
from elbgate.settings import ClientAuth

RELOAD_POLL_SECONDS = 2.0
"""How often the files are checked; a rotation is served within this long."""

_log = logging.getLogger("webhook.tls")


class CertificateInvalid(ValueError):
    """The files do not hold a usable certificate and matching key (or, for the
    client CA, no usable CA)."""


def server_context(client_auth: ClientAuth = "off", client_ca_file: str = "") -> ssl.SSLContext:
    """A server SSLContext that refuses anything older than TLS 1.2 and, unless
    ``client_auth`` is ``off``, asks for a client certificate ``client_ca_file``
    verifies (``require``: the handshake fails without one). A certificate the CA
    does not verify fails the handshake in both modes."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if client_auth != "off":
        try:
            ctx.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise CertificateInvalid(
                f"ELB_GATE_CLIENT_CA_FILE {client_ca_file!r} holds no usable CA: {exc}"
            ) from None
        ctx.verify_mode = ssl.CERT_REQUIRED if client_auth == "require" else ssl.CERT_OPTIONAL
    return ctx


def validate_pair(cert_pem: bytes, key_pem: bytes) -> datetime:
    """Check that ``cert_pem`` (leaf first) and ``key_pem`` belong together;
    return the leaf's notAfter. :class:`CertificateInvalid` otherwise."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as exc:
        raise CertificateInvalid(f"certificate is not PEM: {exc}") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateInvalid(f"key is not an unencrypted PEM private key: {exc}") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise CertificateInvalid("key does not match the certificate")
    return chain[0].not_valid_after_utc


class ServingCertificate:
    """Owns the server's SSLContext and keeps it loaded with the files' pair."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        on_loaded: Callable[[datetime], None] = lambda _not_after: None,
        *,
        client_auth: ClientAuth = "off",
        client_ca_file: str = "",
        fetch: Callable[[], Awaitable[tuple[bytes, bytes] | None]] | None = None,
    ) -> None:
        """``fetch``, when given, is where the pair comes from instead of the files
        (the Secret read through the API); ``cert_file`` then only names it."""
        self.cert_file = cert_file
        self._fetch = fetch
        self.key_file = key_file
        self.context = server_context(client_auth, client_ca_file)
        self.not_after: datetime | None = None
        self._on_loaded = on_loaded
        self._loaded: tuple[bytes, bytes] | None = None
        self._rejected: tuple[bytes, bytes] | None = None

    @property
    def loaded(self) -> bool:
        """True once a valid pair serves handshakes."""
        return self._loaded is not None

    def _read(self) -> tuple[bytes, bytes] | None:
        try:
            # resolve() follows the ..data symlink swap of a mounted Secret.
            cert = Path(self.cert_file).resolve().read_bytes()
            key = Path(self.key_file).resolve().read_bytes()
        except OSError as exc:
            if self._rejected != (b"", b""):
                log(_log, logging.WARNING, "certificate files unreadable", error=str(exc))
                self._rejected = (b"", b"")
            return None
        return cert, key

    def reload_if_changed(self) -> bool:
        """Load the files' pair if it differs from the one in service; True when loaded."""
        return self.offer(self._read())

    def offer(self, pair: tuple[bytes, bytes] | None) -> bool:
        """Load ``pair`` (cert, key) if it differs from the one in service and is valid."""
        if pair is None or pair == self._loaded or pair == self._rejected:
            return False
        try:
            not_after = validate_pair(*pair)
            self._load(pair)
        except (CertificateInvalid, ssl.SSLError, OSError) as exc:
            self._rejected = pair
            log(
                _log,
                logging.WARNING,
                "certificate not loaded; keeping the one in service",
                cert_file=self.cert_file,
                error=str(exc),
            )
            if self._loaded is not None:
                self._load(self._loaded)  # undo a partial load_cert_chain
            return False
        self._loaded, self._rejected, self.not_after = pair, None, not_after
        self._on_loaded(not_after)
        log(
            _log,
            logging.INFO,
            "certificate loaded",
            cert_file=self.cert_file,
            not_after=not_after.isoformat(),
        )
        return True

    def _load(self, pair: tuple[bytes, bytes]) -> None:
        # load_cert_chain only takes paths: hand it a private copy of the exact
        # bytes validated, so a rotation racing this read cannot mix two pairs.
        with tempfile.TemporaryDirectory(prefix="elb-gate-tls-") as tmp:
            cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
            for target, data in ((cert_path, pair[0]), (key_path, pair[1])):
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            self.context.load_cert_chain(cert_path, key_path)

    async def refresh(self) -> bool:
        """Load the pair from its source (files, or ``fetch``) if it changed."""
        if self._fetch is None:
            return self.reload_if_changed()
        return self.offer(await self._fetch())

    async def watch(self, interval: float = RELOAD_POLL_SECONDS) -> None:
        """Poll the source forever (run as a task; cancel to stop)."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.refresh()
            except Exception:  # a watcher that dies silently would freeze rotation
                log(_log, logging.ERROR, "certificate reload failed", exc_info=True)


def secret_fetcher(
    api: KubeApi, namespace: str, name: str
) -> Callable[[], Awaitable[tuple[bytes, bytes] | None]]:
    """A ``fetch`` for :class:`ServingCertificate`: the ``tls.crt``/``tls.key`` of
    Secret ``namespace/name`` (None when absent or unreadable, so the pair in
    service stays)."""
    state = {"warned": ""}
    url_path = path(SECRETS, namespace, name)

    async def fetch() -> tuple[bytes, bytes] | None:
        try:
            secret = await api.get_or_none(path(SECRETS, namespace, name))
        except Exception as exc:  # the API unreachable or refusing: keep serving
            problem = f"{type(exc).__name__}: {exc}"
            if state["warned"] != problem:
                log(_log, logging.WARNING, "certificate Secret unreadable", error=problem)
                state["warned"] = problem
            return None
        data = (secret or {}).get("data") or {}
        if not isinstance(data, dict) or not data.get("tls.crt") or not data.get("tls.key"):
            if state["warned"] != "absent":
                log(_log, logging.WARNING, "certificate Secret absent or empty", secret=url_path)
                state["warned"] = "absent"
            return None
        state["warned"] = ""
        try:
            return base64.b64decode(str(data["tls.crt"])), base64.b64decode(str(data["tls.key"]))
        except ValueError:
            return None

    return fetch
