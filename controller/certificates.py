"""Managed certificates: the leader owns the webhook's CA, its serving pair and the
caBundle of elb-gate's webhook configurations, and renews them with no moment at which
the API server trusts no CA that signed what a webhook Pod serves.

Two Secrets in elb-gate's namespace:

* the CA Secret (:attr:`ControllerSettings.cert_ca_secret`, the controller's alone):
  ``ca.crt`` the *trusted set* — every CA the caBundle must carry, oldest first, the
  last one the *signer* — and ``ca.key`` the signer's key; its annotation
  :data:`PUBLISHED` records which trusted set was last seen in every webhook
  configuration, and since when;
* the TLS Secret (:attr:`WebhookSettings.tls_secret`): ``tls.crt``/``tls.key``, the
  pair the webhook Pods serve (they read it through the API every 2 s), and
  ``ca.crt``, the trusted set for reference.

Each pass reads all of that, :func:`decide` picks the one next step, and the step is
written with a compare-and-swap (resourceVersion); a rival leader's write makes it a
409 and the next pass starts over from what is stored. The order of a CA rotation:

1. a new CA is *appended* to the trusted set (the old one stays);
2. the caBundle of every webhook configuration is set to the trusted set (PUBLISH);
3. only once that set has been published for ``overlap`` is a serving certificate
   signed by the new CA written to the TLS Secret;
4. only once that certificate has been written for ``overlap`` (every Pod has loaded
   it) are the older CAs dropped, and the smaller set published.

A serving certificate is renewed under the same CA with no wait at all: the caBundle
already trusts its signer. What is decided is pure (:func:`decide`, tested as values);
:class:`CertificateManager` does the reads and writes.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from certs import builder
from certs.builder import KeyPair
from elbgate.kube.api import (
    CLUSTERROLES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    SECRETS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    ApiError,
    ApiUnavailable,
    KubeApi,
    path,
)
from elbgate.logs import log
from elbgate.settings import ControllerSettings

logger = logging.getLogger("controller.certificates")

PUBLISHED = "elb-gate.io/ca-bundle-published"
"""Annotation of the CA Secret: ``<sha256 of the trusted set>@<RFC 3339 time>``, the
trusted set last seen in every webhook configuration's caBundle and when."""
MANAGED_BY = "elb-gate.io/managed-by"


class Action(Enum):
    NEW_CA = "new-ca"
    """No usable CA: make one (appended to what is still trusted)."""
    PRUNE = "prune"
    """Drop expired CAs from the trusted set."""
    PUBLISH = "publish"
    """Set every webhook configuration's caBundle to the trusted set."""
    RECORD = "record"
    """Every caBundle already holds the trusted set: record since when."""
    ADD_CA = "add-ca"
    """The signer is past its renewal point: append its successor."""
    ISSUE = "issue"
    """Write a serving certificate signed by the signer."""
    DROP_OLD = "drop-old"
    """The serving certificate of the signer is in service: trust the signer alone."""
    WAIT = "wait"
    """A step is due but its overlap has not passed."""
    KEEP = "keep"


@dataclass(frozen=True)
class Policy:
    ca_lifetime: dt.timedelta
    serving_lifetime: dt.timedelta
    renew_fraction: float
    overlap: dt.timedelta

    @classmethod
    def of(cls, settings: ControllerSettings) -> Policy:
        return cls(
            dt.timedelta(seconds=settings.cert_ca_seconds),
            dt.timedelta(seconds=settings.cert_serving_seconds),
            settings.cert_renew_fraction,
            dt.timedelta(seconds=settings.cert_overlap_seconds),
        )


@dataclass(frozen=True)
class Observed:
    """What is stored, parsed."""

    cas: tuple[x509.Certificate, ...] = ()
    """The trusted set, oldest first; the last one signs."""
    signer_key: Any = None
    """The signer's private key, when the CA Secret holds one that matches it."""
    leaf: x509.Certificate | None = None
    leaf_key_matches: bool = False
    bundles: Mapping[str, bytes | None] = field(default_factory=dict)
    """Each webhook configuration's caBundle (PEM; all its webhooks alike, else None)
    by kind; a configuration that does not exist is absent."""
    published: tuple[str, dt.datetime] | None = None


@dataclass(frozen=True)
class Step:
    action: Action
    reason: str
    trusted: tuple[x509.Certificate, ...] = ()
    """The trusted set after this step (for NEW_CA without the CA still to be made)."""
    at: dt.datetime | None = None
    """WAIT: when the step becomes due; KEEP: when the next renewal is due."""


def pem(certs: Sequence[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def digest(certs: Sequence[x509.Certificate]) -> str:
    return hashlib.sha256(pem(certs)).hexdigest()


def renew_at(cert: x509.Certificate, fraction: float) -> dt.datetime:
    """When ``fraction`` of the certificate's lifetime (from its real start, not the
    backdated notBefore) has passed."""
    start = cert.not_valid_before_utc + builder.BACKDATE
    return start + (cert.not_valid_after_utc - start) * fraction


def issued_at(cert: x509.Certificate) -> dt.datetime:
    """When the certificate was made (it is written at once): notBefore undone."""
    return cert.not_valid_before_utc + builder.BACKDATE


def _signed_by(cert: x509.Certificate, cas: Sequence[x509.Certificate]) -> x509.Certificate | None:
    return next((ca for ca in cas if builder.issued_by(cert, ca)), None)


def decide(obs: Observed, dns_names: Sequence[str], now: dt.datetime, policy: Policy) -> Step:
    """The one next step (the first that applies, in rotation order)."""
    valid = tuple(c for c in obs.cas if c.not_valid_after_utc > now)
    signer = obs.cas[-1] if obs.cas else None
    if signer is None or signer not in valid or obs.signer_key is None:
        why = "no CA yet" if signer is None else "the signing CA is expired or has no key"
        return Step(Action.NEW_CA, why, valid)
    if len(valid) < len(obs.cas):
        return Step(Action.PRUNE, "an expired CA is in the trusted set", valid)
    cas = valid
    want = pem(cas)
    stale = sorted(kind for kind, bundle in obs.bundles.items() if bundle != want)
    if stale:
        return Step(Action.PUBLISH, f"caBundle of {', '.join(stale)} differs", cas)
    if obs.bundles and (obs.published is None or obs.published[0] != digest(cas)):
        return Step(Action.RECORD, "caBundle holds the trusted set", cas)
    # Nothing registered yet: whatever registers uses the trusted set as it is now.
    published_since = obs.published[1] if obs.bundles and obs.published else None
    if len(cas) == 1 and now >= renew_at(signer, policy.renew_fraction):
        return Step(
            Action.ADD_CA,
            f"CA past its renewal point ({_iso(renew_at(signer, policy.renew_fraction))})",
            cas,
        )

    leaf = obs.leaf
    issuer = _signed_by(leaf, cas) if leaf is not None else None
    unusable = (
        "no serving certificate yet"
        if leaf is None
        else "serving key does not match"
        if not obs.leaf_key_matches
        else "serving certificate expired"
        if leaf.not_valid_after_utc <= now
        else "serving certificate not signed by a trusted CA"
        if issuer is None
        else None
    )
    if unusable:  # nothing good is served: no overlap to keep
        return Step(Action.ISSUE, unusable, cas)
    assert leaf is not None
    leaf_due = renew_at(leaf, policy.renew_fraction)
    renewal = (
        "serving certificate names differ from the Service's"
        if sorted(builder.dns_names_of(leaf)) != sorted(dns_names)
        else "serving certificate signed by an older CA"
        if issuer != signer
        else f"serving certificate past its renewal point ({_iso(leaf_due)})"
        if now >= leaf_due
        else None
    )
    if renewal:
        if issuer == signer or published_since is None:
            return Step(Action.ISSUE, renewal, cas)
        due = published_since + policy.overlap
        if now < due:
            return Step(
                Action.WAIT,
                f"{renewal}; the new CA is published since {_iso(published_since)}",
                cas,
                due,
            )
        return Step(Action.ISSUE, renewal, cas)
    if len(cas) > 1:
        due = issued_at(leaf) + policy.overlap
        if now < due:
            return Step(Action.WAIT, f"older CAs stay trusted until {_iso(due)}", cas, due)
        return Step(Action.DROP_OLD, "the new CA's serving certificate is in service", (signer,))
    nxt = min(renew_at(leaf, policy.renew_fraction), renew_at(signer, policy.renew_fraction))
    return Step(Action.KEEP, "certificates valid", cas, nxt)


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="seconds")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(secret: Mapping[str, Any] | None, key: str) -> bytes:
    raw = ((secret or {}).get("data") or {}).get(key)
    try:
        return base64.b64decode(raw) if raw else b""
    except ValueError:
        return b""


def _certs(data: bytes) -> tuple[x509.Certificate, ...]:
    try:
        return tuple(x509.load_pem_x509_certificates(data)) if data else ()
    except ValueError:
        return ()


def _key(data: bytes) -> Any:
    try:
        return serialization.load_pem_private_key(data, password=None) if data else None
    except (ValueError, TypeError):
        return None


_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _matches(cert: x509.Certificate, key: Any) -> bool:
    return key is not None and cert.public_key().public_bytes(
        *_SPKI
    ) == key.public_key().public_bytes(*_SPKI)


def _bundle_of(config: Mapping[str, Any]) -> bytes | None:
    bundles = {
        (hook.get("clientConfig") or {}).get("caBundle") or ""
        for hook in config.get("webhooks") or []
    }
    if len(bundles) != 1:
        return None
    try:
        return base64.b64decode(bundles.pop())
    except ValueError:
        return None


def _published(secret: Mapping[str, Any] | None) -> tuple[str, dt.datetime] | None:
    raw = (((secret or {}).get("metadata") or {}).get("annotations") or {}).get(PUBLISHED, "")
    hexdigest, _, at = raw.partition("@")
    try:
        return hexdigest, dt.datetime.fromisoformat(at)
    except ValueError:
        return None


class CertificateManager:
    """Reads, decides, writes: :meth:`sync` runs steps until nothing is due now."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        settings: ControllerSettings,
        tls_secret: str,
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        may_act: Callable[[], bool] = lambda: True,
        owner: str = "",
    ) -> None:
        """``owner``: a ClusterRole of the release to own the Secrets the manager
        creates, so the garbage collector removes them with it (empty: none)."""
        self.api = api
        self.owner = owner
        self.namespace = namespace
        self.ca_secret = settings.cert_ca_secret
        self.tls_secret = tls_secret
        self.configuration = settings.webhook_configuration
        self.dns_names = builder.service_dns_names(settings.cert_service, namespace)
        self.policy = Policy.of(settings)
        self.clock = clock
        self.may_act = may_act
        self.last: Step | None = None

    async def read(self) -> tuple[Observed, dict[str, Any], dict[str, dict[str, Any]]]:
        """What is stored: parsed, plus the raw CA/TLS Secrets and configurations."""
        ca_secret = await self.api.get_or_none(path(SECRETS, self.namespace, self.ca_secret))
        tls_secret = await self.api.get_or_none(path(SECRETS, self.namespace, self.tls_secret))
        name = self.configuration
        found = {
            VALIDATING_WEBHOOK_CONFIGURATIONS[1]: await self.api.get_or_none(
                path(VALIDATING_WEBHOOK_CONFIGURATIONS, None, name)
            ),
            MUTATING_WEBHOOK_CONFIGURATIONS[1]: await self.api.get_or_none(
                path(MUTATING_WEBHOOK_CONFIGURATIONS, None, name)
            ),
        }
        configs = {kind: c for kind, c in found.items() if c is not None}
        cas = _certs(_unb64(ca_secret, "ca.crt"))
        key = _key(_unb64(ca_secret, "ca.key"))
        leaf_certs = _certs(_unb64(tls_secret, "tls.crt"))
        leaf = leaf_certs[0] if leaf_certs else None
        obs = Observed(
            cas=cas,
            signer_key=key if cas and _matches(cas[-1], key) else None,
            leaf=leaf,
            leaf_key_matches=leaf is not None
            and _matches(leaf, _key(_unb64(tls_secret, "tls.key"))),
            bundles={kind: _bundle_of(c) for kind, c in configs.items()},
            published=_published(ca_secret),
        )
        return obs, {"ca": ca_secret, "tls": tls_secret}, configs

    async def sync(self, max_steps: int = 8) -> Step:
        """Run due steps (each re-reads what is stored) until none is due now."""
        step = Step(Action.KEEP, "not run")
        for _ in range(max_steps):
            if not self.may_act():
                break
            obs, secrets, configs = await self.read()
            now = self.clock()
            step = decide(obs, self.dns_names, now, self.policy)
            if step.action in (Action.KEEP, Action.WAIT):
                break
            log(logger, logging.INFO, "certificates", action=step.action.value, reason=step.reason)
            await self._apply(step, obs, secrets, configs, now)
        self.last = step
        return step

    async def _apply(
        self,
        step: Step,
        obs: Observed,
        secrets: dict[str, Any],
        configs: dict[str, dict[str, Any]],
        now: dt.datetime,
    ) -> None:
        a = step.action
        if a is Action.NEW_CA:
            ca = builder.new_ca(now, lifetime=self.policy.ca_lifetime)
            await self._write_ca(secrets["ca"], (*step.trusted, ca.cert), ca.key_pem(), None)
        elif a is Action.ADD_CA:
            ca = builder.new_ca(now, lifetime=self.policy.ca_lifetime)
            await self._write_ca(secrets["ca"], (*step.trusted, ca.cert), ca.key_pem(), None)
        elif a in (Action.PRUNE, Action.DROP_OLD):
            await self._write_ca(secrets["ca"], step.trusted, _unb64(secrets["ca"], "ca.key"), None)
        elif a is Action.PUBLISH:
            bundle = _b64(pem(step.trusted))
            for kind, config in configs.items():
                if obs.bundles.get(kind) == pem(step.trusted):
                    continue
                for hook in config.get("webhooks") or []:
                    hook.setdefault("clientConfig", {})["caBundle"] = bundle
                if kind == VALIDATING_WEBHOOK_CONFIGURATIONS[1]:
                    await self.api.replace(
                        path(VALIDATING_WEBHOOK_CONFIGURATIONS, None, self.configuration), config
                    )
                else:
                    await self.api.replace(
                        path(MUTATING_WEBHOOK_CONFIGURATIONS, None, self.configuration), config
                    )
            await self._write_ca(
                secrets["ca"],
                step.trusted,
                _unb64(secrets["ca"], "ca.key"),
                (digest(step.trusted), now),
            )
        elif a is Action.RECORD:
            await self._write_ca(
                secrets["ca"],
                step.trusted,
                _unb64(secrets["ca"], "ca.key"),
                (digest(step.trusted), now),
            )
        elif a is Action.ISSUE:
            signer = KeyPair(step.trusted[-1], obs.signer_key)
            leaf = builder.new_serving(
                signer, self.dns_names, now, lifetime=self.policy.serving_lifetime
            )
            await self._write(
                secrets["tls"],
                self.tls_secret,
                {
                    "tls.crt": leaf.cert_pem(),
                    "tls.key": leaf.key_pem(),
                    "ca.crt": pem(step.trusted),
                },
                None,
            )

    async def _write_ca(
        self,
        current: dict[str, Any] | None,
        cas: Sequence[x509.Certificate],
        key_pem: bytes,
        published: tuple[str, dt.datetime] | None,
    ) -> None:
        annotations = dict((((current or {}).get("metadata") or {}).get("annotations")) or {})
        if published is not None:
            annotations[PUBLISHED] = f"{published[0]}@{_iso(published[1])}"
        elif PUBLISHED in annotations and annotations[PUBLISHED].partition("@")[0] != digest(cas):
            annotations.pop(PUBLISHED)
        await self._write(
            current, self.ca_secret, {"ca.crt": pem(cas), "ca.key": key_pem}, annotations
        )

    async def _write(
        self,
        current: dict[str, Any] | None,
        name: str,
        data: Mapping[str, bytes],
        annotations: Mapping[str, str] | None,
    ) -> None:
        """Create, or replace with a CAS on the resourceVersion read."""
        meta: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "labels": {MANAGED_BY: "elb-gate-controller"},
        }
        if current is not None:
            old = current.get("metadata") or {}
            meta = {**old, "labels": {**(old.get("labels") or {}), **meta["labels"]}}
            if annotations is None:
                annotations = old.get("annotations")
        if annotations:
            meta["annotations"] = dict(annotations)
        else:
            meta.pop("annotations", None)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "type": "Opaque" if name == self.ca_secret else "kubernetes.io/tls",
            "data": {k: _b64(v) for k, v in data.items()},
        }
        if current is None:
            owner = (
                await self.api.get_or_none(path(CLUSTERROLES, None, self.owner))
                if self.owner
                else None
            )
            if owner is not None:
                meta["ownerReferences"] = [
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "ClusterRole",
                        "name": owner["metadata"]["name"],
                        "uid": owner["metadata"]["uid"],
                    }
                ]
            await self.api.create(path(SECRETS, self.namespace), body)
        else:
            await self.api.replace(path(SECRETS, self.namespace, name), body)

    async def ca_bundle(self) -> str | None:
        """The trusted set (base64 PEM, as a caBundle holds it), for registration."""
        secret = await self.api.get_or_none(path(SECRETS, self.namespace, self.ca_secret))
        cas = _certs(_unb64(secret, "ca.crt"))
        return _b64(pem(cas)) if cas else None


async def run(
    manager: CertificateManager | None,
    interval: float,
    may_act: Callable[[], bool],
    registrar: Any = None,
    register_every: float = 2.0,
) -> None:
    """While leading: certificates every ``interval`` (at once on a WAIT that comes due),
    and a registration pass (``registrar``, :mod:`controller.registration`) every
    ``register_every``; both right after the election."""
    loop = asyncio.get_running_loop()
    next_certs = 0.0
    while True:
        delay = min(interval, 1.0)  # not leading: look again soon, to start when elected
        if not may_act():
            next_certs = 0.0
        else:
            delay = register_every if registrar is not None else interval
            try:
                if registrar is not None:
                    await registrar.sync()
                if manager is not None and loop.time() >= next_certs:
                    step = await manager.sync()
                    wait = interval
                    if step.at is not None:
                        due = (step.at - manager.clock()).total_seconds()
                        wait = max(0.05, min(interval, due + 0.05))
                    next_certs = loop.time() + wait
                    delay = min(delay, wait)
            except (ApiError, ApiUnavailable) as exc:
                log(
                    logger,
                    logging.WARNING,
                    "certificates/registration: API call failed",
                    detail=str(exc),
                )
            except Exception:  # never let the loop die: rotation would freeze
                log(logger, logging.ERROR, "certificates/registration: sync failed", exc_info=True)
        await asyncio.sleep(delay)
