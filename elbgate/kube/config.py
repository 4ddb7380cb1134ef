"""Where the API server is and how to authenticate: in-cluster or kubeconfig.

Parsing kubeconfig is left to the official ``kubernetes`` client's loader (it
handles contexts, embedded data, exec plugins); we only take the result.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(RuntimeError):
    """No usable API configuration; the message says what to fix."""


@dataclass
class TokenSource:
    """A bearer token that stays fresh without a restart: re-read from its file
    (rotated projected service-account tokens), or re-obtained through ``reload``
    (kubeconfig exec plugins / auth providers such as kubelogin on AKS, whose
    tokens expire within the hour a capacity wait plus a submit can take)."""

    token: str = ""
    path: str = ""
    reload: Callable[[], str] | None = None
    reread_seconds: float = 60.0
    loaded_at: float | None = None
    """``clock()`` at the last successful read; ``None`` (never read) reads on first use.
    Not 0: ``time.monotonic()`` counts from boot, so on a node up for less than
    ``reread_seconds`` "0" would look recent and the first calls would carry no token."""
    clock: Callable[[], float] = time.monotonic

    def current(self) -> str:
        """The token to send now, re-read first when the last read is ``reread_seconds`` old."""
        due = self.loaded_at is None or self.clock() - self.loaded_at >= self.reread_seconds
        if due and (self.path or self.reload is not None):
            try:
                fresh = Path(self.path).read_text().strip() if self.path else self._reload()
            except Exception:  # keep the last good token; the API call will say if it is refused
                fresh = ""
            if fresh:
                self.token = fresh
                self.loaded_at = self.clock()
        return self.token

    def _reload(self) -> str:
        assert self.reload is not None
        return self.reload()


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
        dynamic = any(k in users.get(user, {}) for k in ("exec", "auth-provider"))
        namespace = (active.get("context") or {}).get("namespace") or "default"
        return cls(
            host=conf.host.rstrip("/"),
            ca_file=conf.ssl_ca_cert,
            cert_file=conf.cert_file,
            key_file=conf.key_file,
            verify=bool(conf.verify_ssl),
            token=TokenSource(
                token=_bearer(conf),
                reload=(lambda: _bearer(_load_kubeconfig(config_file, context)[0]))
                if dynamic
                else None,
                reread_seconds=300.0,
                loaded_at=time.monotonic(),
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
