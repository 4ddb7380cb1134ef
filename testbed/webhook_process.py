"""Run the real ``python -m webhook`` against the control plane, wired as a cluster wires it.

    with WebhookProcess(cp) as hook:            # certs, env, ports, /readyz, configurations
        ns = hook.install.gate("team-a")         # created, RoleBindings, elb-gate.io/gated=true
        cp.kubectl("bob", "-n", ns, "create", "-f", "-", input=finalizer_yaml)

The process authenticates with a token of its ServiceAccount
(``elb-system/elb-gate-webhook``) bound to a Pod of its own, granted exactly
what ``manifests/`` grants. The webhook configurations registered are the
shipped ones with ONE transformation, the only one a cluster without a
container runtime needs: each webhook's ``clientConfig.service`` becomes
``url: https://127.0.0.1:PORT<path>``, and ``caBundle`` is filled in (as
``make certs`` or cert-manager's cainjector does). :func:`point_at` is that
transformation; ``tests/install/test_webhook_configs.py`` checks nothing else
differs.

The fast tier is enough for what its users test (the decisions, the API calls and
their RBAC, TLS, faults): those do not depend on who runs the process; the install as
shipped (image, Deployments, probes, the Service) is tests/system/.
"""

from __future__ import annotations

import copy
import shutil
import ssl
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import yaml

from testbed.api import ApiError, JsonObj
from testbed.certs import MountedCertificate
from testbed.component import ComponentProcess
from testbed.controlplane import REPO, ControlPlane
from testbed.install import CENSUS_FENCE_JOB, Installation
from testbed.waiting import wait_until

MANIFEST = REPO / "manifests" / "base" / "admission-webhooks.yaml"


def shipped_configurations(manifest: Path = MANIFEST) -> list[JsonObj]:
    """The webhook configurations as shipped."""
    return [d for d in yaml.safe_load_all(manifest.read_text()) if d]


def point_at(docs: Sequence[Mapping[str, Any]], port: int, ca_bundle: str) -> list[JsonObj]:
    """The one transformation the testbed makes: ``clientConfig.service`` →
    ``url: https://127.0.0.1:<port><service.path>``, with ``caBundle`` filled in."""
    out: list[JsonObj] = []
    for shipped in docs:
        doc: JsonObj = copy.deepcopy(dict(shipped))
        for hook in doc.get("webhooks") or []:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{service.get('path', '/')}"
            hook["clientConfig"]["caBundle"] = ca_bundle
        out.append(doc)
    return out


SHORT_LEASES = {
    "ELB_GATE_LEASE_MIN_DURATION_SECONDS": "1",
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": "0",
    # With no skew the derived exec timeout (TTL - 2 x skew) would equal the TTL, which
    # the settings refuse; neither server uses it, so it is pinned below the TTL.
    "ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS": "600",
}
"""Webhook and controller settings under which a Lease written with
``leaseDurationSeconds: 2`` expires two seconds after its last renewal: the only way to
age one, as the webhook stamps renewTime on its own clock (it cannot be backdated)."""


class WebhookProcess(ComponentProcess):
    """The webhook as a child process, registered with the control plane; a context manager."""

    def __init__(
        self,
        cp: ControlPlane,
        env: Mapping[str, str] | None = None,
        *,
        workdir: Path | None = None,
        register: bool = True,
        namespaces: Iterable[str] = (),
        pod: str = "elb-gate-webhook-0",
        kubeconfig: str | None = None,
        manifest: Path = MANIFEST,
    ) -> None:
        """``env`` adds to/overrides the process environment; ``namespaces`` are
        created if needed and gated when the process is registered; ``kubeconfig``
        replaces the ServiceAccount's (e.g. one through the fault proxy)."""
        self.cp = cp
        self.install = Installation.on(cp)
        self.namespaces = tuple(namespaces)
        self.extra_env = dict(env or {})
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="elb-gate-webhook-"))
        identity = self.install.identity("webhook", pod)
        super().__init__(identity, self.workdir / "webhook.log", kubeconfig)
        self.certificate = MountedCertificate(self.workdir / "tls")
        self.port = 0
        self._register = register
        self._registered: list[tuple[str, str]] = []
        self.manifest = manifest

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> WebhookProcess:
        """Start, wait for ``/readyz``, then register the configurations. Both ports are
        0: the ones chosen are read from its ``listening`` log line."""
        settings = {
            "ELB_GATE_WEBHOOK_PORT_NUMBER": "0",
            "ELB_GATE_METRICS_PORT_NUMBER": "0",
            "ELB_GATE_TLS_CERT_FILE": self.certificate.cert_file,
            "ELB_GATE_TLS_KEY_FILE": self.certificate.key_file,
            "ELB_GATE_CENSUS_FENCE_JOB": CENSUS_FENCE_JOB,
            **self.extra_env,
        }
        listening = self.spawn("webhook", settings, "listening", timeout)
        self.port, self.metrics_port = listening["webhook"][0][1], listening["metrics"][0][1]
        try:
            self.wait_until(lambda: self.ready(5.0), timeout, "the webhook's /readyz")
        except BaseException:
            self.halt()
            raise
        if self._register:
            self.register()
            for namespace in self.namespaces:
                self.install.gate(namespace)
        return self

    def stop(self) -> int | None:
        """Unregister, SIGTERM, wait; returns the exit code (0 when it stopped cleanly)."""
        if self._register:
            self.unregister()
        code = self.halt()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return code

    def __enter__(self) -> WebhookProcess:
        return self.start()

    # -- cluster wiring ----------------------------------------------------------------

    def register(self) -> None:
        """Store the shipped configurations pointed at this process (replacing any left by
        another process)."""
        docs = point_at(
            shipped_configurations(self.manifest), self.port, self.certificate.ca_bundle
        )
        register(self.install, docs, self._registered, [self], 60)

    def unregister(self) -> None:
        """Remove the configurations this process registered, if still its own."""
        unregister(self.cp, self._registered, self.port)

    # -- observation -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def census_reads(self) -> Counter[str]:
        """Gate B census reads each way so far (``watch (fenced)``, ``list (not_synced)``
        …), from this process's /metrics."""
        out: Counter[str] = Counter()
        for sample in self.samples("elb_gate_census_reads_total"):
            out[f"{sample.labels['source']} ({sample.labels['reason']})"] += int(sample.value)
        return out

    def census_fence(self) -> Counter[str]:
        """The fenced census reads' two phases so far (``write``, ``wait``: docs/interfaces.md),
        from this process's /metrics: per phase the count, the total in ms, and how many
        took over 50, 100 and 250 ms (``wait over 0.1 s`` …)."""
        out: Counter[str] = Counter()
        bounds = ("0.05", "0.1", "0.25")
        for sample in self.samples("elb_gate_census_fence_seconds"):
            phase, n = sample.labels["phase"], int(sample.value)
            metric = sample.name.removeprefix("elb_gate_census_fence_seconds")
            if metric == "_count":
                out.update({phase: n, **{f"{phase} over {le} s": n for le in bounds}})
            elif metric == "_sum":
                out[f"{phase} ms"] += round(sample.value * 1000)
            elif metric == "_bucket" and sample.labels["le"] in bounds:
                out[f"{phase} over {sample.labels['le']} s"] -= n
        return out

    def client_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts this process's CA (for direct HTTPS calls)."""
        return ssl.create_default_context(cadata=self.certificate.ca_pem.decode())

    def registered(self) -> list[JsonObj]:
        """What is registered now (copies)."""
        return [copy.deepcopy(self.cp.admin.get(r, None, n)) for r, n in self._registered]


def register(
    install: Installation,
    docs: Iterable[JsonObj],
    registered: list[tuple[str, str]],
    processes: Sequence[WebhookProcess],
    timeout: float,
) -> None:
    """Store the webhook configurations ``docs`` (replacing what is there), each noted
    once in ``registered`` as (resource, name); then wait until the API server calls one
    of ``processes`` for a dry-run Lease write in a probe namespace (their logs show the
    request).

    The API server applies a new webhook configuration from its informer a moment after
    the write; until then gated writes are not sent to the new webhook."""
    cp = install.cp
    for doc in docs:
        cp.admin.apply(doc)
        key = (cp.admin.resource(doc["kind"]).plural, doc["metadata"]["name"])
        if key not in registered:
            registered.append(key)
    probe = install.gate("elb-gate-probe")
    meta = {"name": f"elb-blast-submit-{probe}", "namespace": probe}
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": {}}

    def seen() -> int:
        return sum(p.log().count(probe) for p in processes)

    def reached() -> bool:
        before = seen()
        with suppress(ApiError):  # refused is fine: the webhook was called (or will be)
            cp.admin.create(lease, dryRun="All")
        return seen() > before

    wait_until(reached, timeout, "the API server to call the webhook registered", 0.2)


def unregister(cp: ControlPlane, registered: list[tuple[str, str]], port: int) -> None:
    """Remove the configurations ``registered`` that still point at ``port`` (another
    webhook may have registered its own since), and forget them."""
    for resource, name in registered:
        current = cp.admin.find(resource, None, name) or {}
        urls = [h["clientConfig"].get("url", "") for h in current.get("webhooks") or []]
        if any(f":{port}/" in u for u in urls):
            cp.admin.delete(resource, None, name)
    registered.clear()
