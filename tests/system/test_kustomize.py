"""The kustomize install on real kubelet nodes: ``kubectl apply -k`` of the shipped
overlay with generated certificates (``make certs`` into a scratch copy of
manifests/, never the operator's own overlays/generated), the Pods Ready by their
probes, a Gate B denial as a user sees it through the Service, and ``kubectl
delete -k`` leaving nothing that can refuse a request.

The overlay gates ``default`` by its label, as docs/install.md says."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from certs import files
from certs.cli import main as certs_main
from testbed import elastic_blast as elb
from testbed.clients import OpenApiLeaseClient
from testbed.system_tier import NAMESPACE, SystemTier
from tests.install.rendering import MANIFESTS
from tests.system.load import DENIED, HOLDER, Load

pytestmark = [pytest.mark.system, pytest.mark.kubectl, pytest.mark.timeout(900)]

GATED = "default"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Straight to the Pod: a proxy from the environment must never see the bridge."""


def report(name: str, value: object) -> None:
    print(f"\nSYSTEM-TIER {name}: {value}")


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<tmp>/manifests/overlays/generated``: the shipped manifests with fresh certificates."""
    root = tmp_path_factory.mktemp("kustomize")
    manifests = root / "manifests"
    shutil.copytree(MANIFESTS, manifests, ignore=shutil.ignore_patterns("generated"))
    make_certs(manifests)
    return manifests / "overlays" / "generated"


def make_certs(manifests: Path, *extra: str) -> str:
    """``make certs ARGS=...`` into the scratch copy (material beside it)."""
    out = io.StringIO()
    code = certs_main(
        [
            "--out",
            str(manifests.parent / "certs-out"),
            "--overlay",
            str(manifests / "overlays" / "generated"),
            "--base",
            str(manifests / "base"),
            *extra,
        ],
        out=out,
    )
    assert code == 0, out.getvalue()
    return out.getvalue()


def served_expiry(ip: str) -> float | None:
    """``elb_gate_certificate_expiry_timestamp_seconds`` on a webhook Pod's metrics
    port (its address on the run's own bridge): the certificate it has loaded."""
    try:
        with NO_PROXY.open(f"http://{ip}:9090/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("elb_gate_certificate_expiry_timestamp_seconds"):
            return float(line.split()[-1])
    return None


def webhook_restarts(pod: dict[str, Any]) -> int:
    [cs] = [s for s in pod["status"]["containerStatuses"] if s["name"] == "webhook"]
    return int(cs["restartCount"])


def create(t: SystemTier, user: str, obj: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return t.kubectl(user, "create", "-f", "-", input=json.dumps(obj))


def test_kubectl_apply_k_serves_and_delete_k_leaves_nothing_that_refuses(
    tier: SystemTier, overlay: Path
) -> None:
    t = tier
    t.open_namespace(GATED)
    seeded = sorted(elb.search_id() for _ in range(3))
    for job_id in seeded:
        t.cp.admin.create(elb.ready(elb.submit_jobs(job_id), GATED))

    began = time.monotonic()
    applied = t.kubectl("admin", "apply", "-k", str(overlay), timeout=180)
    assert applied.returncode == 0, applied.stderr
    labelled = t.kubectl("admin", "label", "namespace", GATED, "elb-gate.io/gated=true")
    assert labelled.returncode == 0, labelled.stderr
    t.wait_ready_or_crash("webhook", 2)
    t.wait_ready_or_crash("controller", 2)
    report("kubectl apply -k to all four Pods Ready (s)", round(time.monotonic() - began, 1))
    for pod in t.pods("webhook"):
        [cs] = [s for s in pod["status"]["containerStatuses"] if s["name"] == "webhook"]
        assert cs["ready"] and cs["restartCount"] == 0, t.describe()
        [container] = [c for c in pod["spec"]["containers"] if c["name"] == "webhook"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert len(t.ready_endpoints("elb-gate-webhook")) == 2
    for hook in t.cp.admin.get("validatingwebhookconfigurations", None, "elb-gate")["webhooks"]:
        assert "url" not in hook["clientConfig"]
        assert hook["clientConfig"]["service"]["namespace"] == NAMESPACE

    # alice's Lease, taken once the webhook stamps its holder's user.
    lease = OpenApiLeaseClient.on(t.cp, "alice", GATED, holder=HOLDER)
    assert lease.acquire() == "acquired", lease.last_stderr
    stamped = t.cp.admin.get("leases", GATED, f"elb-blast-submit-{GATED}")
    annotations = stamped["metadata"].get("annotations") or {}
    assert annotations.get("elb-gate.io/holder-user") == "alice", stamped["metadata"]

    # Gate B through the Service, with the ids of the three running searches.
    # The label reaches the API server's webhook selector at once, the Pods' own
    # view of the namespace within a watch event: retry the create until judged.
    def denied() -> str | None:
        result = create(t, "alice", elb.ready(elb.finalizer(elb.search_id()), GATED))
        if result.returncode == 0:
            raise AssertionError("alice's finalizer over the ceiling was admitted")
        return result.stderr.strip() if DENIED in result.stderr else None

    stderr = t.wait_until("a Gate B denial from the kustomize install", 120, denied)
    assert stderr.startswith(
        'Error from server (TooManyRequests): error when creating "STDIN": ' + DENIED
    ), stderr
    assert DENIED + f"Gate B: 3/3 searches already active in namespace {GATED}" in stderr
    assert f"Retry when one of {', '.join(seeded)} completes." in stderr
    report("kustomize Gate B denial", stderr)

    # Renewal as docs/install.md says: `make certs ARGS='--renew-before …'` then
    # apply -k. Only the Secret changes (same CA): no Pod restarts, no admission fails.
    pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in t.pods("webhook")}
    old_expiry = {served_expiry(ip) for ip in pods.values()}
    assert len(old_expiry) == 1 and None not in old_expiry, old_expiry
    with Load(t, GATED) as load:
        time.sleep(3)
        began = time.monotonic()
        printed = make_certs(overlay.parents[1], "--renew-before", "400d")
        renewed = files.load(overlay.parents[1].parent / "certs-out").serving
        assert renewed is not None
        new_expiry = renewed.cert.not_valid_after_utc.timestamp()
        assert new_expiry not in old_expiry, printed
        reapplied = t.kubectl("admin", "apply", "-k", str(overlay), timeout=180)
        assert reapplied.returncode == 0, reapplied.stderr
        t.wait_until(
            "both webhook Pods serving the renewed certificate",
            300,
            lambda: all(served_expiry(ip) == new_expiry for ip in pods.values()),
        )
        reloaded = time.monotonic() - began
        time.sleep(3)
    report(
        "kustomize certificate renewal under load",
        f"both Pods reloaded {reloaded:.1f}s after make certs; {load.summary()}; "
        f"failed={load.failed}",
    )
    assert {p["metadata"]["name"]: webhook_restarts(p) for p in t.pods("webhook")} == dict.fromkeys(
        pods, 0
    )
    assert load.outcomes["admission:answered"] > 0
    assert load.failed == 0, "\n".join(load.failures[:10])

    # Uninstall as docs/install.md: unlabel first, then delete -k.
    unlabelled = t.kubectl("admin", "label", "namespace", GATED, "elb-gate.io/gated-")
    assert unlabelled.returncode == 0, unlabelled.stderr
    began = time.monotonic()
    deleted = t.kubectl("admin", "delete", "-k", str(overlay), "--timeout=240s", timeout=300)
    assert deleted.returncode == 0, deleted.stderr
    report("kubectl delete -k (s)", round(time.monotonic() - began, 1))
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        assert [c["metadata"]["name"] for c in t.cp.admin.list(kind, None)] == [], kind
    assert t.cp.admin.list("validatingadmissionpolicies", None) == []
    assert t.cp.admin.list("validatingadmissionpolicybindings", None) == []
    assert t.cp.admin.find("namespaces", None, NAMESPACE) is None
    # What was refused is admitted now: bob's finalizer, and bob taking alice's Lease.
    result = create(t, "bob", elb.ready(elb.finalizer(elb.search_id()), GATED))
    assert result.returncode == 0, result.stderr
    bob = t.cp.api("bob")
    held = bob.get("leases", GATED, f"elb-blast-submit-{GATED}")
    held["spec"]["holderIdentity"] = "openapi-0b0b0b0b0b0b4b0b8b0b0b0b0b0b0b0b"
    bob.update(held)
