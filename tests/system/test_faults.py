"""Faults a cluster inflicts on an installed elb-gate, on real kubelet nodes, with a
steady stream of admissions counting what callers see: one replica's readiness
failing for real (its API access cut inside its own network namespace), the
kernel OOM-killing a container at its memory limit, and the serving certificate
replaced under load (the chart's documented renewal: delete the Secret, ``helm
upgrade``). The tests run in order on one install (each leaves it serving)."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from testbed.api import JsonObj
from testbed.system_tier import NAMESPACE, SystemTier
from testbed.waiting import wait_until
from tests.system.conftest import VALUES as GATED_VALUES
from tests.system.load import Load

pytestmark = [pytest.mark.system, pytest.mark.kubectl, pytest.mark.timeout(900)]

LOAD_NS = "st-load"
SERVICE = "elb-gate-webhook"
KUBERNETES_SERVICE = ("10.96.0.1", "443")
"""Where a Pod reaches the API server (the ``kubernetes`` Service the tier routes)."""


def report(name: str, value: object) -> None:
    print(f"\nSYSTEM-TIER {name}: {value}")


VALUES = (*GATED_VALUES, "certificates.source=generated")
"""The faults are those of any source; the renewal below is the ``generated`` source's
(delete the Secret, ``helm upgrade``): the ``managed`` source's in-process rotation,
the chart's default, is tests/system/test_lifecycle.py's."""


@pytest.fixture(scope="module")
def installed(tier: SystemTier) -> SystemTier:
    result = tier.install(*VALUES)
    assert result.returncode == 0, result.stderr
    tier.wait_ready_or_crash("webhook", 2)
    tier.wait_ready_or_crash("controller", 2)
    return tier


def webhook_status(pod: JsonObj) -> JsonObj:
    """The webhook container's status; empty while the kubelet has reported none yet
    (a Pod of a rollout that is still being created)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s["name"] == "webhook"), {})


def quiet(t: SystemTier, seconds: float = 6) -> Load:
    """A short stream once things have settled: every admission must be answered."""
    with Load(t, LOAD_NS) as load:
        time.sleep(seconds)
    assert load.outcomes["admission:answered"] > 0, load.summary()
    assert load.failed == 0, "\n".join(load.failures[:10])
    return load


def wait_answering(t: SystemTier, load: Load, what: str, timeout: float = 300) -> None:
    """Until 20 admissions in a row have been answered with no failure among them."""
    mark = [load.outcomes["admission:answered"], load.failed]

    def streak() -> bool:
        if load.failed != mark[1]:
            mark[:] = [load.outcomes["admission:answered"], load.failed]
            return False
        return load.outcomes["admission:answered"] - mark[0] >= 20

    t.wait_until(what, timeout, streak)


@contextmanager
def api_cut(t: SystemTier, pod: JsonObj) -> Iterator[None]:
    """Reset every TCP segment the Pod sends to the API server, in the Pod's own
    network namespace (made by this run's CNI), until the block ends."""
    node = pod["spec"]["nodeName"]
    container_id = webhook_status(pod)["containerID"].removeprefix("containerd://")
    [pid] = [
        line.split()[1]
        for line in t.ctr(node, "tasks", "ls").splitlines()
        if line.startswith(container_id)
    ]
    host, port = KUBERNETES_SERVICE
    rule = [
        "OUTPUT",
        "-d",
        f"{host}/32",
        "-p",
        "tcp",
        "--dport",
        port,
        "-j",
        "REJECT",
        "--reject-with",
        "tcp-reset",
    ]
    netns = ["nsenter", f"--net=/proc/{pid}/ns/net", "iptables"]
    subprocess.run([*netns, "-I", *rule], check=True, capture_output=True, text=True)
    try:
        yield
    finally:
        subprocess.run([*netns, "-D", *rule], check=True, capture_output=True, text=True)


def test_a_replica_whose_readiness_fails_leaves_the_endpoints_and_the_other_answers(
    installed: SystemTier,
) -> None:
    t = installed
    [victim, other] = t.pods("webhook")
    name, victim_ip = victim["metadata"]["name"], victim["status"]["podIP"]
    restarts = webhook_status(victim)["restartCount"]
    assert len(t.ready_endpoints(SERVICE)) == 2
    with api_cut(t, victim):
        with Load(t, LOAD_NS) as window:
            t.wait_until(
                "the replica without API access out of the EndpointSlice",
                120,
                lambda: t.ready_endpoints(SERVICE) == [other["status"]["podIP"]],
            )
        report(
            "readiness cut: until the EndpointSlice dropped it",
            f"{window.summary()}; failed={window.failed}",
        )
        for line in window.failures[:3]:
            report("  admission failure", line)
        # Until then the API server still calls the cut replica, which refuses what
        # it cannot verify (fail-closed, 503): it never admits.
        assert all("could not verify" in f for f in window.failures), window.failures[:5]
        pod = t.cp.admin.get("pods", NAMESPACE, name)
        ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
        # Not restarted: liveness (/healthz) still passes; only readiness fails.
        assert webhook_status(pod)["restartCount"] == restarts
        dropped = quiet(t, 8)
        report(
            "readiness cut: with one replica in the EndpointSlice",
            f"{dropped.summary()}; failed={dropped.failed}",
        )
        assert victim_ip not in t.ready_endpoints(SERVICE)
    t.wait_until(
        "the replica back in the EndpointSlice once its API access returns",
        120,
        lambda: victim_ip in t.ready_endpoints(SERVICE) and len(t.ready_endpoints(SERVICE)) == 2,
    )
    assert webhook_status(t.cp.admin.get("pods", NAMESPACE, name))["restartCount"] == restarts
    back = quiet(t)
    report("readiness cut: after it returned", f"{back.summary()}; failed={back.failed}")


def test_a_container_over_its_memory_limit_is_oom_killed_and_admissions_heal(
    installed: SystemTier,
) -> None:
    t = installed
    low = "24Mi"
    limits = (f"webhook.resources.requests.memory={low}", f"webhook.resources.limits.memory={low}")
    oom: dict[str, object] = {}
    with Load(t, LOAD_NS) as load:
        result = t.install(*VALUES, *limits, action="upgrade")
        assert result.returncode == 0, result.stderr[-2000:]

        def oom_killed() -> bool:
            for pod in t.pods("webhook"):
                [c] = [c for c in pod["spec"]["containers"] if c["name"] == "webhook"]
                if c["resources"]["limits"]["memory"] != low:
                    continue
                cs = webhook_status(pod)
                for state in (cs.get("lastState") or {}, cs.get("state") or {}):
                    term = state.get("terminated") or {}
                    if term.get("reason") == "OOMKilled":
                        oom.update(
                            pod=pod["metadata"]["name"],
                            restarts=cs["restartCount"],
                            terminated=term,
                        )
                        return True
            return False

        t.wait_until(f"a webhook container OOM-killed at {low}", 240, oom_killed)
        statuses = [
            (
                p["metadata"]["name"],
                webhook_status(p).get("state"),
                webhook_status(p).get("restartCount"),
            )
            for p in t.pods("webhook")
        ]
        # The old replicas keep serving: the rollout waits for a Ready new Pod.
        time.sleep(3)
    report("OOM kill", oom)
    report("OOM kill: webhook Pods", statuses)
    report(
        "OOM kill: admissions while the new Pod was OOM-killed",
        f"{load.summary()}; failed={load.failed}",
    )
    assert load.outcomes["admission:answered"] > 0
    assert load.failed == 0, "\n".join(load.failures[:10])
    events = t.kubectl(
        "admin",
        "-n",
        NAMESPACE,
        "get",
        "events",
        "--field-selector",
        f"involvedObject.name={oom['pod']}",
        "-o",
        "custom-columns=REASON:.reason,MESSAGE:.message",
        "--no-headers",
    )
    report("OOM kill: kubelet events", events.stdout.strip().replace("\n", " | "))
    rolled = t.helm("rollback", "elb-gate", "-n", NAMESPACE)
    assert rolled.returncode == 0, rolled.stderr
    t.wait_rolled_out("elb-gate-webhook")
    t.wait_until(
        "the OOM-killed Pod gone",
        120,
        lambda: t.cp.admin.find("pods", NAMESPACE, str(oom["pod"])) is None,
    )
    t.wait_ready_or_crash("webhook", 2)
    for pod in t.pods("webhook"):
        if not pod["metadata"].get("deletionTimestamp"):
            [c] = [c for c in pod["spec"]["containers"] if c["name"] == "webhook"]
            assert c["resources"]["limits"]["memory"] != low
    healed = quiet(t)
    report("OOM kill: after the rollback", f"{healed.summary()}; failed={healed.failed}")


def test_the_serving_certificate_renewed_under_load_is_reloaded_without_a_restart(
    installed: SystemTier,
) -> None:
    t = installed
    secret_name = "elb-gate-webhook-tls"
    old = t.cp.admin.get("secrets", NAMESPACE, secret_name)["data"]
    before = {p["metadata"]["name"]: webhook_status(p)["restartCount"] for p in t.pods("webhook")}
    with Load(t, LOAD_NS) as load:
        time.sleep(3)
        began = time.monotonic()
        t.cp.admin.delete("secrets", NAMESPACE, secret_name)
        result = t.install(*VALUES, action="upgrade")
        assert result.returncode == 0, result.stderr[-2000:]
        new = t.cp.admin.get("secrets", NAMESPACE, secret_name)["data"]
        assert new["ca.crt"] != old["ca.crt"] and new["tls.crt"] != old["tls.crt"]

        def bundles_updated() -> bool:
            # The controller registered the configurations and updates them from the
            # chart's rendering once the upgrade changed it (docs/design.md,
            # "Registration").
            return all(
                hook["clientConfig"]["caBundle"] == new["ca.crt"]
                for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
                for hook in t.cp.admin.get(kind, None, "elb-gate")["webhooks"]
            )

        wait_until(bundles_updated, 120, "both configurations carry the renewed CA")
        wait_answering(t, load, "admissions answered under the new CA", 300)
        healed = time.monotonic() - began
    report(
        "certificate renewal under load",
        f"answered again {healed:.1f}s after the Secret was deleted; {load.summary()}; failed={load.failed}",
    )
    for line in load.failures[:2] + load.failures[-2:]:
        report("  admission failure", line)
    # What fails is the API server's TLS verification (the new caBundle against the
    # old certificate, until the kubelet refreshes the mounted Secret): nothing admitted.
    assert all("x509: certificate signed by unknown authority" in f for f in load.failures), [
        f for f in load.failures if "x509" not in f
    ][:5]
    after = {p["metadata"]["name"]: webhook_status(p)["restartCount"] for p in t.pods("webhook")}
    assert after == before, "the webhook Pods were replaced or restarted"
    assert base64.b64decode(new["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    steady = quiet(t)
    report("certificate renewal: afterwards", f"{steady.summary()}; failed={steady.failed}")
