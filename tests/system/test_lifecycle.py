"""The chart's lifecycle on real kubelet nodes with managed certificates (the default):
the controller's leader rotates the webhook's CA and serving certificate under a
steady stream of admissions and Lease renewals with none failing.

The tests of this module run in order on one install of their own."""

from __future__ import annotations

import base64
import hashlib
import time

import pytest
from cryptography import x509

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


@pytest.fixture(scope="module")
def rotating(tier: SystemTier) -> SystemTier:
    result = tier.install(*VALUES, *SHORT_LIFETIMES)
    assert result.returncode == 0, result.stderr
    tier.wait_ready_or_crash("webhook", 2)
    tier.wait_ready_or_crash("controller", 2)
    return tier


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
