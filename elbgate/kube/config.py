"""Where the API server is and how to authenticate: in-cluster or kubeconfig.

Parsing kubeconfig is left to the official ``kubernetes`` client's loader (it
handles contexts, embedded data, exec plugins); we only take the result.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from elbgate.logs import log

_LOG = logging.getLogger("elbgate.kube.config")

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(RuntimeError):
    """No usable API configuration; the message says what to fix."""


class CredentialError(RuntimeError):
    """No token may be sent: the last one has expired (or there never was one) and
    obtaining a new one failed. The message says why: the exec plugin's own error, the
    token file that cannot be read."""


@dataclass(frozen=True)
class Credential:
    """A bearer token as obtained, and when it stops being valid, if that is known."""

    token: str
    expires_at: float | None = None
    """Unix time after which the API server refuses it (an exec plugin's
    ``status.expirationTimestamp``, a JWT's ``exp``); ``None``: not known."""


@dataclass
class TokenSource:
    """A bearer token that stays fresh without a restart: re-read from its file
    (rotated projected service-account tokens), or re-obtained through ``reload``
    (kubeconfig exec plugins / auth providers such as kubelogin on AKS, whose
    tokens expire within the hour a capacity wait plus a submit can take).

    As client-go does: a token is obtained again when ``reread_seconds`` have passed
    or when it has expired, whichever comes first. A failed attempt is never silent:
    it is logged with its reason and counted (``failures``), and the last token is
    kept only while it is still valid; once it is not, :meth:`current` raises
    :class:`CredentialError` with the reason, instead of sending a token the API
    server will refuse (client-go: ``getting credentials: exec: ...``)."""

    token: str = ""
    path: str = ""
    reload: Callable[[], Credential] | None = None
    reread_seconds: float = 60.0
    loaded_at: float | None = None
    """``clock()`` at the last successful read; ``None`` (never read) reads on first use.
    Not 0: ``time.monotonic()`` counts from boot, so on a node up for less than
    ``reread_seconds`` "0" would look recent and the first calls would carry no token."""
    valid_until: float | None = None
    """``clock()`` from which ``token`` has expired; ``None``: not known (kept until the
    API server refuses it)."""
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    """Unix time, to place an expiry (a wall-clock time) on ``clock``."""
    failures: int = 0
    """Attempts to obtain a token that failed, since start."""
    last_error: str = ""
    """Why the last failed attempt failed."""

    @property
    def due_at(self) -> float | None:
        """``clock()`` from which the token is obtained again (``None``: now)."""
        if self.loaded_at is None:
            return None
        due = self.loaded_at + self.reread_seconds
        return due if self.valid_until is None else min(due, self.valid_until)

    def current(self) -> str:
        """The token to send now, obtained again first when due (see the class)."""
        if not (self.path or self.reload is not None):
            return self.token
        due_at = self.due_at
        # "now >= loaded_at + period", not "now - loaded_at >= period": the difference
        # of two large monotonic readings can round below the period at the very
        # instant it is due, and the token would not be obtained again when due.
        if due_at is not None and self.clock() < due_at:
            return self.token
        try:
            fresh = self._obtain()
        except (OSError, ValueError, CredentialError) as exc:
            return self._keep_or_raise(exc)
        self.token = fresh.token
        self.loaded_at = now = self.clock()
        self.valid_until = (
            None if fresh.expires_at is None else now + (fresh.expires_at - self.wall())
        )
        return self.token

    def _obtain(self) -> Credential:
        if self.path:
            text = Path(self.path).read_text().strip()
            if not text:
                raise CredentialError(f"token file {self.path} is empty")
            return Credential(text, _jwt_expiry(text))
        assert self.reload is not None
        fresh = self.reload()
        if not fresh.token:
            raise CredentialError("the kubeconfig's credential plugin gave no token")
        return fresh

    def _keep_or_raise(self, exc: BaseException) -> str:
        self.failures += 1
        self.last_error = reason = " ".join(str(exc).split()) or exc.__class__.__name__
        what = f"token file {self.path}" if self.path else "the kubeconfig's credential plugin"
        now = self.clock()
        valid = bool(self.token) and (self.valid_until is None or now < self.valid_until)
        log(
            _LOG,
            logging.WARNING if valid else logging.ERROR,
            "cannot obtain a fresh API token; keeping the last one while it is valid"
            if valid
            else "cannot obtain an API token, and the last one has expired",
            source=what,
            reason=reason,
            failures=self.failures,
            valid_for_seconds=None
            if self.valid_until is None or not valid
            else round(self.valid_until - now, 1),
        )
        if not valid:
            raise CredentialError(f"getting credentials from {what}: {reason}") from None
        return self.token


def _jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (a projected service-account token), unverified: only
    to know how long it may be kept; ``None`` when ``token`` is not a JWT with one."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


@dataclass
class KubeConfig:
    """Everything needed to reach the API server."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    token: TokenSource = field(default_factory=TokenSource)
    namespace: str = "default"

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.host.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    @classmethod
    def load(cls, kubeconfig: str | None = None, context: str | None = None) -> KubeConfig:
        """In-cluster config when running in a pod (and no kubeconfig is named),
        else the kubeconfig from ``kubeconfig``/``$KUBECONFIG``/``~/.kube/config``."""
        explicit = kubeconfig or os.environ.get("KUBECONFIG")
        if not explicit and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.in_cluster()
        return cls.from_kubeconfig(explicit, context)

    @classmethod
    def in_cluster(cls) -> KubeConfig:
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (SA_DIR / "token").exists():
            raise KubeConfigError(
                "not running in a pod with a service-account token "
                f"({SA_DIR}/token); set KUBECONFIG"
            )
        ns_file = SA_DIR / "namespace"
        return cls(
            host=f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}",
            ca_file=str(SA_DIR / "ca.crt"),
            token=TokenSource(path=str(SA_DIR / "token")),
            namespace=ns_file.read_text().strip() if ns_file.exists() else "default",
        )

    @classmethod
    def from_kubeconfig(cls, path: str | None, context: str | None = None) -> KubeConfig:
        from kubernetes.config.config_exception import ConfigException

        config_file = path.split(os.pathsep)[0] if path else None
        target = Path(config_file) if config_file else Path.home() / ".kube" / "config"
        where = str(target)
        try:
            problem = _document_problem(target)
            if problem:
                raise ConfigException(problem)
            conf, active = _load_kubeconfig(config_file, context)
        except (ConfigException, OSError, TypeError, ValueError, KeyError, AttributeError) as exc:
            # One line, whatever the loader tripped on: the message is what to fix.
            reason = " ".join(str(exc).split())
            raise KubeConfigError(
                f"cannot load kubeconfig {where}: {reason}; set KUBECONFIG or --kubeconfig"
            ) from None
        user = (active.get("context") or {}).get("user")
        users = {u.get("name"): u.get("user") or {} for u in _kubeconfig_users(config_file)}
        kind = next((k for k in ("exec", "auth-provider") if k in users.get(user, {})), None)
        reload = None if kind is None else partial(_reload, kind, config_file, context)
        namespace = (active.get("context") or {}).get("namespace") or "default"
        token = _bearer(conf)
        return cls(
            host=conf.host.rstrip("/"),
            ca_file=conf.ssl_ca_cert,
            cert_file=conf.cert_file,
            key_file=conf.key_file,
            verify=bool(conf.verify_ssl),
            token=TokenSource(
                token=token,
                reload=reload,
                reread_seconds=300.0,
                # The loader ran the plugin once already; when that gave no token (it
                # logs a plugin's failure and carries on without), the first call
                # obtains one itself, and fails with the reason if it cannot.
                loaded_at=time.monotonic() if token or reload is None else None,
            ),
            namespace=namespace,
        )


def _load_kubeconfig(config_file: str | None, context: str | None) -> tuple[Any, dict[str, Any]]:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    conf = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=config_file, context=context, client_configuration=conf)
    contexts, active = k8s_config.list_kube_config_contexts(config_file=config_file)
    if context:
        active = next((c for c in contexts if c.get("name") == context), active)
    return conf, active


def _reload(kind: str, config_file: str | None, context: str | None) -> Credential:
    """The kubeconfig user's token obtained again: from its exec plugin ourselves (for
    the plugin's error and expiry), from an auth provider through the official loader."""
    from kubernetes.config.config_exception import ConfigException

    if kind == "exec":
        return _exec_plugin(config_file, context)
    try:
        return Credential(_bearer(_load_kubeconfig(config_file, context)[0]))
    except ConfigException as exc:
        raise CredentialError(str(exc)) from None


def _exec_plugin(config_file: str | None, context: str | None) -> Credential:
    """Run the exec credential plugin of the kubeconfig's user (``users[].user.exec``)
    with the official client's :class:`ExecProvider`, which raises with the plugin's
    exit code and stderr (its kubeconfig loader only logs them and goes on without a
    token); the token and its ``expirationTimestamp``."""
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.exec_provider import ExecProvider
    from kubernetes.config.kube_config import ConfigNode

    target = Path(config_file or Path.home() / ".kube" / "config")
    doc = _kubeconfig_document(target)
    active = _named(doc, "contexts", "context", context or doc.get("current-context"))
    user = _named(doc, "users", "user", active.get("user"))
    cluster = _named(doc, "clusters", "cluster", active.get("cluster"))
    if not isinstance(user.get("exec"), dict):
        raise CredentialError(f"{target}: the context's user has no exec plugin")
    try:
        status = ExecProvider(
            ConfigNode("exec", user["exec"]),
            str(target.parent.absolute()),
            ConfigNode("cluster", cluster),
        ).run()
    except ConfigException as exc:
        raise CredentialError(str(exc)) from None
    token = status.get("token") if isinstance(status, dict) else None
    if not isinstance(token, str) or not token:
        raise CredentialError(
            "exec plugin returned no token (client certificates from a plugin are not supported)"
        )
    expires = status.get("expirationTimestamp")
    try:
        expires_at = (
            datetime.fromisoformat(expires).timestamp() if isinstance(expires, str) else None
        )
    except ValueError:
        raise CredentialError(
            f"exec plugin returned an unreadable expirationTimestamp {expires!r}"
        ) from None
    return Credential(token, expires_at)


def _kubeconfig_document(target: Path) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(target.read_text()) or {}
    except yaml.YAMLError as exc:
        raise CredentialError(f"{target}: not valid YAML ({exc.__class__.__name__})") from None
    return doc if isinstance(doc, dict) else {}


def _named(doc: dict[str, Any], section: str, key: str, name: object) -> dict[str, Any]:
    """``doc[section][i][key]`` of the entry called ``name`` (``{}`` if none)."""
    for entry in doc.get(section) or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            inner = entry.get(key)
            return inner if isinstance(inner, dict) else {}
    return {}


def _document_problem(target: Path) -> str | None:
    """What makes ``target`` unusable as a kubeconfig document, in words, or ``None``.
    A missing file is said to be one (the official loader calls it an "Invalid
    kube-config file. No configuration found."). The official
    loader lets a YAML syntax error escape as a multi-line ``yaml`` exception and
    a document that is not a mapping as a ``TypeError`` about item assignment."""
    import yaml

    try:
        text = target.read_text()
    except FileNotFoundError:
        return "no such file"
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or "unparseable"
        return f"not valid YAML{where} ({what})"
    if doc is not None and not isinstance(doc, dict):
        kind = {"str": "string", "list": "list"}.get(type(doc).__name__, "scalar")
        return (
            f"not a kubeconfig: the document is a YAML {kind}, "
            "not a mapping with clusters, contexts and users"
        )
    return None


def _kubeconfig_users(config_file: str | None) -> list[dict[str, Any]]:
    import yaml

    target = Path(config_file or Path.home() / ".kube" / "config")
    try:
        doc = yaml.safe_load(target.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    users = doc.get("users") if isinstance(doc, dict) else None
    return [u for u in users or [] if isinstance(u, dict)]


def _bearer(conf: Any) -> str:
    # Recent kubernetes clients store the token as api_key["BearerToken"] ("Bearer x");
    # older releases used api_key["authorization"]. Accept both.
    auth = (
        conf.api_key.get("authorization", "")
        or conf.api_key.get("BearerToken", "")
        or conf.get_api_key_with_prefix("authorization")
        or ""
    )
    return str(auth[len("Bearer ") :] if auth.startswith("Bearer ") else auth)
