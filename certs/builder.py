"""Pure certificate building: a CA and the webhook's serving certificate.

No files, no clock: every function takes ``now`` and returns objects, so the
rules (SANs, key usages, validity, when to renew) are tested as plain values.
Writing PEM files and the kustomize overlay lives in :mod:`certs.files` and
:mod:`certs.overlay`.

Keys are ECDSA P-256: the API server's Go TLS client and Python's ``ssl`` both
accept it, and it is cheap to generate (tests make several).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import Enum

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_NAME = "elb-gate-webhook"
SERVICE_NAMESPACE = "elb-system"
CA_DAYS = 3650
SERVING_DAYS = 365
BACKDATE = dt.timedelta(minutes=5)
"""Certificates start a little in the past so a node clock slightly behind ours accepts them."""


def service_dns_names(service: str = SERVICE_NAME, namespace: str = SERVICE_NAMESPACE) -> list[str]:
    """Every name a client may use for ``service`` (the API server uses ``NAME.NS.svc``)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


@dataclass(frozen=True)
class KeyPair:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> KeyPair:
        """Load a pair written by :meth:`cert_pem`/:meth:`key_pem`."""
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("expected an ECDSA private key")
        return cls(x509.load_pem_x509_certificate(cert_pem), key)


def new_ca(
    now: dt.datetime,
    days: int = CA_DAYS,
    common_name: str = "elb-gate webhook CA",
    *,
    lifetime: dt.timedelta | None = None,
) -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (pathLength 0), valid
    ``days`` (or ``lifetime``) from ``now``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        _skeleton(name, name, key, now, _validity(days, lifetime))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            _key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True
        )
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def new_serving(
    ca: KeyPair,
    dns_names: list[str],
    now: dt.datetime,
    days: int = SERVING_DAYS,
    *,
    lifetime: dt.timedelta | None = None,
) -> KeyPair:
    """A leaf for ``dns_names`` (serverAuth only), signed by ``ca``, valid ``days`` (or
    ``lifetime``) from ``now`` and never beyond the CA."""
    if not dns_names:
        raise ValueError("a serving certificate needs at least one DNS name")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])])
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        _skeleton(
            subject,
            ca.cert.subject,
            key,
            now,
            _validity(days, lifetime),
            not_after_cap=ca.cert.not_valid_after_utc,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def dns_names_of(cert: x509.Certificate) -> list[str]:
    """The certificate's DNS SANs (empty when it has none)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return san.get_values_for_type(x509.DNSName)


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """True when ``ca`` signed ``cert``."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def expires_within(cert: x509.Certificate, now: dt.datetime, window: dt.timedelta) -> bool:
    """True when ``cert`` is no longer valid at ``now + window``."""
    return cert.not_valid_after_utc <= now + window


class Action(Enum):
    """What :func:`plan` decided to (re)issue."""

    KEEP = "keep"
    NEW_SERVING = "new-serving"
    NEW_CA = "new-ca"


@dataclass(frozen=True)
class Plan:
    action: Action
    reason: str


def plan(
    ca: KeyPair | None,
    serving: KeyPair | None,
    dns_names: list[str],
    now: dt.datetime,
    renew_before: dt.timedelta,
) -> Plan:
    """Decide what to issue. The CA is replaced only when it is missing or
    itself close to expiry (that changes the caBundle); everything else about a
    stale serving certificate is fixed by re-issuing the leaf under the same CA,
    which the API server already trusts."""
    if ca is None:
        return Plan(Action.NEW_CA, "no CA yet")
    if expires_within(ca.cert, now, renew_before):
        return Plan(Action.NEW_CA, f"CA expires {ca.cert.not_valid_after_utc:%Y-%m-%d}")
    if serving is None:
        return Plan(Action.NEW_SERVING, "no serving certificate yet")
    if not issued_by(serving.cert, ca.cert):
        return Plan(Action.NEW_SERVING, "serving certificate was not issued by the CA")
    if sorted(dns_names_of(serving.cert)) != sorted(dns_names):
        return Plan(Action.NEW_SERVING, "serving certificate names differ from the Service's")
    if expires_within(serving.cert, now, renew_before):
        return Plan(
            Action.NEW_SERVING,
            f"serving certificate expires {serving.cert.not_valid_after_utc:%Y-%m-%d}, "
            f"within the renew-before window",
        )
    return Plan(Action.KEEP, "serving certificate is valid and outside the renew-before window")


def ca_bundle(
    current: x509.Certificate, previous: x509.Certificate | None, now: dt.datetime
) -> bytes:
    """PEM bundle for the webhook configurations' ``caBundle``. While a CA is
    being rotated the old one stays trusted until it expires, so replicas still
    serving the old leaf keep answering until the kubelet refreshes their Secret."""
    certs = [current]
    if previous is not None and previous != current and previous.not_valid_after_utc > now:
        certs.append(previous)
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _skeleton(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    now: dt.datetime,
    validity: dt.timedelta,
    not_after_cap: dt.datetime | None = None,
) -> x509.CertificateBuilder:
    not_after = now + validity
    if not_after_cap is not None:
        # A leaf never outlives its CA: the chain would break before the leaf "expires".
        not_after = min(not_after, not_after_cap)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
    )


def _validity(days: int, lifetime: dt.timedelta | None) -> dt.timedelta:
    if lifetime is not None:
        if lifetime <= dt.timedelta(0):
            raise ValueError("validity must be positive")
        return lifetime
    if days <= 0:
        raise ValueError("validity must be at least one day")
    return dt.timedelta(days=days)


def _key_usage(
    *, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )
