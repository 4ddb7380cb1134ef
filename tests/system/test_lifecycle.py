"""The chart's Helm lifecycle on real kubelet nodes, as shipped (managed certificates,
controller registration): a failing install leaves no webhook configuration; an
``--atomic`` install serves; the controller's leader rotates the webhook's CA and
serving certificate under a steady stream of admissions and Lease renewals with none
failing; an upgrade and a rollback reach the registered configurations; an operator's
unregister removes them until the next upgrade; an uninstall, which runs no hook,
leaves nothing that can refuse a request, even when the image never started.

The tests of this module run in order, on installs of their own."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import threading
import time

import pytest
from cryptography import x509

from manifests.generate import CHART
from testbed import elastic_blast as elb
from testbed.system_tier import NAMESPACE, SystemTier
from testbed.waiting import wait_until
from tests.system.conftest import VALUES
from tests.system.load import Load

pytestmark = [pytest.mark.system, pytest.mark.kubectl, pytest.mark.timeout(1200)]

LOAD_NS = "st-load"
SHORT_LIFETIMES = (
    # At the default renewFraction (0.67) a CA rotation begins at 80 s and a serving
    # certificate is renewed every 27 s; each overlap is 10 s.
    "certificates.managed.caLifetime=120s",
    "certificates.managed.servingLifetime=40s",
    "certificates.managed.overlap=10s",
    "settings.extra.ELB_GATE_CERT_CHECK_SECONDS=1",
)


def report(name: str, value: object) -> None:
    print(f"\nSYSTEM-TIER {name}: {value}")


def _fingerprints(pem: bytes) -> tuple[str, ...]:
    return tuple(
        hashlib.sha256(c.tbs_certificate_bytes).hexdigest()[:12]
        for c in x509.load_pem_x509_certificates(pem)
    )


class Certificates:
    """What the controller has stored, read as the administrator."""

    def __init__(self, tier: SystemTier) -> None:
        self.tier = tier

    def _data(self, secret: str, key: str) -> bytes:
        found = self.tier.cp.admin.find("secrets", NAMESPACE, secret)
        raw = ((found or {}).get("data") or {}).get(key)
        return base64.b64decode(raw) if raw else b""

    def trusted(self) -> tuple[str, ...]:
        return _fingerprints(self._data("elb-gate-webhook-ca", "ca.crt"))

    def leaf(self) -> str:
        pem = self._data("elb-gate-webhook-tls", "tls.crt")
        return _fingerprints(pem)[0] if pem else ""

    def bundles(self) -> set[tuple[str, ...]]:
        out = set()
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            config = self.tier.cp.admin.find(kind, None, "elb-gate")
            for hook in (config or {}).get("webhooks") or []:
                raw = hook["clientConfig"].get("caBundle") or ""
                out.add(_fingerprints(base64.b64decode(raw)) if raw else ())
        return out


KINDS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")


def configurations(t: SystemTier) -> list[str]:
    """Every webhook configuration of the cluster (the tier runs nothing else)."""
    return [f"{k}/{c['metadata']['name']}" for k in KINDS for c in t.cp.admin.list(k, None)]


class Watch:
    """Polls the cluster's webhook configurations in a thread: every one ever seen."""

    def __init__(self, t: SystemTier) -> None:
        self.t, self.seen = t, set[str]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen |= set(configurations(self.t))
            time.sleep(0.2)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def helm_install(t: SystemTier, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["install", "elb-gate", str(CHART), "-n", NAMESPACE, "--create-namespace"]
    return t.helm(*argv, *args)


def helm_upgrade(t: SystemTier, *args: str) -> subprocess.CompletedProcess[str]:
    """``helm upgrade`` of the release with its values kept, then ``args``."""
    argv = ["upgrade", "elb-gate", str(CHART), "-n", NAMESPACE, "--reuse-values"]
    return t.helm(*argv, "--timeout=300s", *args)


def sets(*values: str) -> list[str]:
    return [a for v in values for a in ("--set", v)]


def left_behind(t: SystemTier) -> list[str]:
    """What could refuse a request, or belongs to a release that should be gone."""
    out = configurations(t)
    out += [f"pod/{p['metadata']['name']}" for p in t.cp.admin.list("pods", NAMESPACE)]
    if t.cp.admin.find("configmaps", NAMESPACE, "elb-gate-webhook-configurations"):
        out.append("configmap/elb-gate-webhook-configurations")
    return out


def test_namespace_create_is_refused_by_helm_install_with_the_reason(tier: SystemTier) -> None:
    """Helm keeps its release record in the namespace, so it exists before the chart
    is applied: the chart says so instead of failing on 'already exists'."""
    result = helm_install(tier, *sets(*VALUES, "namespace.create=true"))
    assert result.returncode != 0
    assert "namespace.create=true is for `helm template`" in result.stderr, result.stderr
    assert "--create-namespace" in result.stderr
    assert not left_behind(tier)


def test_an_install_that_fails_applying_leaves_no_webhook_configuration(tier: SystemTier) -> None:
    """The issue's case: a gated namespace that does not exist yet. ``--atomic`` rolls
    the release back; no webhook was ever registered."""
    t = tier
    with Watch(t) as watch:
        result = helm_install(
            t,
            "--atomic",
            "--timeout=240s",
            *sets("gatedNamespaces={st-gate-a,st-not-created}"),
        )
        assert result.returncode != 0
        assert 'namespaces "st-not-created" not found' in result.stderr, result.stderr
        wait_until(lambda: not left_behind(t), 180, "the rolled-back release gone")
    assert watch.seen == set(), watch.seen
    assert t.helm("status", "elb-gate", "-n", NAMESPACE).returncode != 0


def test_an_atomic_install_whose_image_cannot_start_rolls_back_and_leaves_nothing(
    tier: SystemTier,
) -> None:
    """Pods that never start (pullPolicy Never, a tag no node holds: no pull is tried)
    -> ``helm install --atomic`` times out and uninstalls the release. Nothing judged a
    single request meanwhile, and nothing of the release is left: uninstalling runs no
    hook, so it does not need the image that cannot start."""
    t = tier
    with Watch(t) as watch:
        result = helm_install(
            t,
            "--atomic",
            "--timeout=60s",
            *sets(*VALUES, "image.tag=0.0.0-missing", "image.pullPolicy=Never"),
        )
        assert result.returncode != 0, result.stdout
        report("atomic install with a broken image", result.stderr.strip().splitlines()[-1:])
        assert "has been uninstalled due to atomic" in result.stderr, result.stderr
        assert "error occurred while uninstalling" not in result.stderr, result.stderr
        wait_until(lambda: not left_behind(t), 180, "the rolled-back release gone")
    assert watch.seen == set(), watch.seen
    assert t.helm("status", "elb-gate", "-n", NAMESPACE).returncode != 0
    for kind in ("deployments", "jobs", "configmaps", "secrets"):
        owned = [
            o["metadata"]["name"]
            for o in t.cp.admin.list(kind, NAMESPACE)
            if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == "elb-gate"
        ]
        assert owned == [], (kind, owned)


@pytest.fixture(scope="module")
def rotating(tier: SystemTier) -> SystemTier:
    began = time.monotonic()
    result = helm_install(tier, "--atomic", "--timeout=300s", *sets(*VALUES, *SHORT_LIFETIMES))
    assert result.returncode == 0, result.stderr
    report("helm install --atomic (s)", round(time.monotonic() - began, 1))
    tier.wait_ready_or_crash("webhook", 2)
    tier.wait_ready_or_crash("controller", 2)
    wait_until(lambda: len(configurations(tier)) == 2, 120, "both configurations registered")
    report("helm install --atomic to registered (s)", round(time.monotonic() - began, 1))
    return tier


def test_the_atomic_install_registers_both_configurations_owned_by_the_release(
    rotating: SystemTier,
) -> None:
    t = rotating
    owner = t.cp.admin.get("clusterroles", None, "elb-gate-webhook")
    for kind in KINDS:
        config = t.cp.admin.get(kind, None, "elb-gate")
        [ref] = config["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == (
            "ClusterRole",
            "elb-gate-webhook",
            owner["metadata"]["uid"],
        )
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["service"]["name"] == "elb-gate-webhook"
            assert hook["clientConfig"]["caBundle"]
    with Load(t, LOAD_NS) as load:
        time.sleep(3)
    assert load.outcomes["admission:answered"] > 0 and load.failed == 0, load.failures[:5]


def test_a_ca_rotation_and_serving_renewals_under_load_fail_no_admission(
    rotating: SystemTier,
) -> None:
    t, certs = rotating, Certificates(rotating)
    wait_until(lambda: certs.leaf() and certs.trusted(), 120, "the first pair written")
    first_ca = certs.trusted()[-1]
    leaves: list[str] = []
    trusted_sets: list[tuple[str, ...]] = []
    bundles: list[tuple[str, ...]] = []
    rotated_at: float | None = None
    answered_at_drop = 0
    began = time.monotonic()
    with Load(t, LOAD_NS) as load:
        while time.monotonic() - began < 600:
            leaf, trusted = certs.leaf(), certs.trusted()
            if not leaves or leaves[-1] != leaf:
                leaves.append(leaf)
            if not trusted_sets or trusted_sets[-1] != trusted:
                trusted_sets.append(trusted)
            for b in sorted(certs.bundles()):
                if not bundles or bundles[-1] != b:
                    bundles.append(b)
            done = (
                len(trusted) == 1
                and trusted[0] != first_ca
                and certs.bundles() == {trusted}
                and len(leaves) >= 4
            )
            if done and rotated_at is None:
                rotated_at = time.monotonic()
                answered_at_drop = load.outcomes["admission:answered"]
            # Keep the load going past the drop of the old CA: an admission answered
            # then was served with a certificate of the new CA.
            if rotated_at is not None and time.monotonic() - rotated_at > 15:
                break
            time.sleep(0.5)
        after_drop = load.outcomes["admission:answered"] - answered_at_drop
    report("rotation: trusted sets in order", trusted_sets)
    report("rotation: caBundles in order", bundles)
    report("rotation: serving certificates seen", len(leaves))
    report("rotation under load", f"{load.summary()}; failed={load.failed}")
    assert rotated_at is not None, (trusted_sets, bundles, leaves, t.describe())
    assert max(len(s) for s in trusted_sets) == 2  # the overlap happened
    assert load.outcomes["admission:answered"] > 0 and load.outcomes["renewal:answered"] > 0
    assert after_drop > 0
    assert load.failed == 0, "\n".join(load.failures[:20])


def _timeouts(t: SystemTier) -> set[int]:
    return {
        h["timeoutSeconds"]
        for kind in KINDS
        for h in t.cp.admin.get(kind, None, "elb-gate")["webhooks"]
    }


def test_an_upgrade_under_load_reaches_the_registered_configurations(rotating: SystemTier) -> None:
    t = rotating
    assert _timeouts(t) == {5}
    with Load(t, LOAD_NS) as load:
        time.sleep(2)
        began = time.monotonic()
        result = helm_upgrade(
            t,
            "--atomic",
            *sets("webhook.timeoutSeconds=6"),
            "--set-string",
            "webhook.podAnnotations.rollout=2",
        )
        assert result.returncode == 0, result.stderr[-2000:]
        report("helm upgrade --atomic (s)", round(time.monotonic() - began, 1))
        wait_until(lambda: _timeouts(t) == {6}, 120, "the upgraded configurations registered")
        t.wait_rolled_out("elb-gate-webhook")
        time.sleep(3)
    report("upgrade under load", f"{load.summary()}; failed={load.failed}")
    assert load.outcomes["admission:answered"] > 0
    assert load.failed == 0, "\n".join(load.failures[:20])


def test_a_rollback_under_load_reaches_the_registered_configurations(rotating: SystemTier) -> None:
    t = rotating
    with Load(t, LOAD_NS) as load:
        result = t.helm("rollback", "elb-gate", "1", "-n", NAMESPACE, "--wait", "--timeout=300s")
        assert result.returncode == 0, result.stderr
        wait_until(lambda: _timeouts(t) == {5}, 120, "the rolled-back configurations registered")
        t.wait_rolled_out("elb-gate-webhook")
        time.sleep(3)
    report("rollback under load", f"{load.summary()}; failed={load.failed}")
    assert load.outcomes["admission:answered"] > 0
    assert load.failed == 0, "\n".join(load.failures[:20])


def test_an_operators_unregister_removes_the_configurations_until_the_next_upgrade(
    rotating: SystemTier,
) -> None:
    """docs/install.md, "Uninstall": ``python -m controller unregister`` in the
    controller's Pod, as the controller's own ServiceAccount, deletes the ConfigMap and
    both configurations, and no leader registers them again; an upgrade brings the
    ConfigMap back and the leader registers them again."""
    t = rotating
    result = t.kubectl(
        "admin",
        "-n",
        NAMESPACE,
        "exec",
        "deploy/elb-gate-controller",
        "--",
        "python",
        "-m",
        "controller",
        "unregister",
    )
    assert result.returncode == 0, result.stderr
    assert configurations(t) == []
    assert t.cp.admin.find("configmaps", NAMESPACE, "elb-gate-webhook-configurations") is None
    time.sleep(5)  # several registration passes of the leader
    assert configurations(t) == []
    result = helm_upgrade(t, "--wait")
    assert result.returncode == 0, result.stderr[-2000:]
    wait_until(lambda: len(configurations(t)) == 2, 120, "both configurations registered again")


def test_uninstall_leaves_nothing_and_the_configurations_go_with_the_release(
    rotating: SystemTier,
) -> None:
    """No hook: Helm deletes the release's objects, the garbage collector removes the
    two configurations with their owner ClusterRole."""
    t = rotating
    gone_at: list[float] = []
    pods_gone_at: list[float] = []
    began = time.monotonic()

    def observe() -> None:
        while time.monotonic() - began < 300 and not (gone_at and pods_gone_at):
            now = time.monotonic() - began
            if not gone_at and not configurations(t):
                gone_at.append(now)
            if not pods_gone_at and not [
                p
                for p in t.pods("webhook")
                if all(c.get("ready") for c in p["status"].get("containerStatuses") or [])
                and p["status"].get("containerStatuses")
            ]:
                pods_gone_at.append(now)
            time.sleep(0.1)

    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    result = t.helm("uninstall", "elb-gate", "-n", NAMESPACE, "--wait", "--timeout=300s")
    assert result.returncode == 0, result.stderr
    took = time.monotonic() - began
    watcher.join(60)
    report("helm uninstall --wait (s)", round(took, 1))
    report(
        "uninstall: configurations gone / serving webhook Pods gone at (s)", (gone_at, pods_gone_at)
    )
    wait_until(lambda: configurations(t) == [], 120, "the configurations collected")
    wait_until(lambda: not left_behind(t), 120, "nothing of the release left")
    for secret in ("elb-gate-webhook-ca", "elb-gate-webhook-tls"):
        assert t.cp.admin.find("secrets", NAMESPACE, secret) is None
    # Nothing judges the namespace any more: what the webhook refused is admitted.
    result = t.kubectl(
        "bob",
        "create",
        "-f",
        "-",
        input=json.dumps(elb.ready(elb.finalizer(elb.search_id()), "st-gate-a")),
    )
    assert result.returncode == 0, result.stderr
