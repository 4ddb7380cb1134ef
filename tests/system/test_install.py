"""The chart as shipped (``helm install``, unmodified) on real kubelet nodes, with the
image ``make image`` builds: the Pods start and are Ready by their probes, the API
server reaches the webhook through the Service (EndpointSlice → Pod IP), both gates
deny as a user sees it, and an upgrade, a rollback, a killed Pod, a drained node and
an uninstall are what admissions see under a steady stream of them.

The tests of this module run in order on one install (each leaves it serving)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from testbed import elastic_blast as elb
from testbed.api import JsonObj
from testbed.clients import OpenApiLeaseClient
from testbed.system_tier import NAMESPACE, SystemTier
from testbed.waiting import wait_until
from tests.system.conftest import VALUES
from tests.system.load import DENIED, Load

pytestmark = [pytest.mark.system, pytest.mark.kubectl, pytest.mark.timeout(900)]

GATE_A_NS, GATE_B_NS, LOAD_NS = "st-gate-a", "st-gate-b", "st-load"
HOLDER = "openapi-6a1c0e6b5f8f4b83a1d2c3e4f5a6b7c8"
ROLL = ("webhook.podAnnotations.rollout=2", "controller.podAnnotations.rollout=2")


def report(name: str, value: object) -> None:
    """A measured number, printed for the run's log (``-s`` or the CI log)."""
    print(f"\nSYSTEM-TIER {name}: {value}")


@pytest.fixture(scope="module")
def seeded_ids(tier: SystemTier) -> list[str]:
    """Three searches already running in GATE_B_NS when elb-gate is installed."""
    ids = sorted(elb.search_id() for _ in range(3))
    for job_id in ids:
        tier.cp.admin.create(elb.ready(elb.submit_jobs(job_id), GATE_B_NS))
    return ids


@pytest.fixture(scope="module")
def installed(tier: SystemTier, seeded_ids: list[str]) -> SystemTier:
    began = time.monotonic()
    result = tier.install(*VALUES)
    assert result.returncode == 0, result.stderr
    tier.wait_ready_or_crash("webhook", 2)
    tier.wait_ready_or_crash("controller", 2)
    report("helm install (s)", round(tier.timings["install"], 1))
    report("helm install to all four Pods Ready (s)", round(time.monotonic() - began, 1))
    report("tier start-up (s)", round(tier.timings["start"], 1))
    return tier


def create(t: SystemTier, user: str, obj: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return t.kubectl(user, "create", "-f", "-", input=json.dumps(obj))


def test_both_deployments_start_and_are_ready_by_their_probes(installed: SystemTier) -> None:
    t = installed
    for component in ("webhook", "controller"):
        pods = t.pods(component)
        assert len(pods) == 2, t.describe()
        for pod in pods:
            [cs] = [s for s in pod["status"]["containerStatuses"] if s["name"] == component] or pod[
                "status"
            ]["containerStatuses"][:1]
            assert cs["ready"] and cs["restartCount"] == 0, t.describe()
            [container] = [c for c in pod["spec"]["containers"] if c["name"] == cs["name"]]
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            # Ready is the probe's verdict, after the container started (the stand-in
            # marks Ready at bind time: both at once).
            started = cs["state"]["running"]["startedAt"]
            ready_at = next(
                c["lastTransitionTime"] for c in pod["status"]["conditions"] if c["type"] == "Ready"
            )
            assert ready_at >= started
    assert len({p["spec"]["nodeName"] for p in t.pods("webhook")}) == 2
    assert len(t.ready_endpoints("elb-gate-webhook")) == 2


def test_the_webhooks_are_called_through_the_service(installed: SystemTier) -> None:
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        for hook in installed.cp.admin.get(kind, None, "elb-gate")["webhooks"]:
            assert "url" not in hook["clientConfig"]
            assert hook["clientConfig"]["service"]["namespace"] == NAMESPACE


def test_gate_a_denies_a_finalizer_from_a_user_not_holding_the_lease(
    installed: SystemTier,
) -> None:
    t, ns = installed, GATE_A_NS
    lease = OpenApiLeaseClient.on(t.cp, "alice", ns, holder=HOLDER)
    assert lease.acquire() == "acquired", lease.last_stderr
    job = elb.ready(elb.finalizer(elb.search_id()), ns)
    result = create(t, "bob", job)
    assert result.returncode == 1
    stderr = result.stderr.strip()
    assert stderr.startswith('Error from server (Forbidden): error when creating "STDIN": ')
    assert DENIED + f"Gate A: user bob does not hold Lease {ns}/elb-blast-submit-{ns}" in stderr
    assert f"held by {HOLDER} (user alice)" in stderr
    assert t.cp.admin.find("jobs", ns, job["metadata"]["name"]) is None


def test_gate_b_denies_a_search_over_the_ceiling_with_the_active_ids(
    installed: SystemTier, seeded_ids: list[str]
) -> None:
    t, ns = installed, GATE_B_NS
    lease = OpenApiLeaseClient.on(t.cp, "alice", ns, holder=HOLDER)
    assert lease.acquire() == "acquired", lease.last_stderr
    result = create(t, "alice", elb.ready(elb.finalizer(elb.search_id()), ns))
    assert result.returncode == 1
    stderr = result.stderr.strip()
    assert stderr.startswith(
        'Error from server (TooManyRequests): error when creating "STDIN": ' + DENIED
    )
    assert DENIED + f"Gate B: 3/3 searches already active in namespace {ns}" in stderr
    assert f"Retry when one of {', '.join(seeded_ids)} completes." in stderr


def test_helm_upgrade_rolls_both_deployments_under_load_with_no_failed_admission(
    installed: SystemTier,
) -> None:
    t = installed
    before = {c: {p["metadata"]["name"] for p in t.pods(c)} for c in ("webhook", "controller")}
    with Load(t, LOAD_NS) as load:
        time.sleep(3)
        result = t.install(*VALUES, action="upgrade", strings=ROLL)
        assert result.returncode == 0, result.stderr[-2000:]
        t.wait_rolled_out("elb-gate-webhook")
        t.wait_rolled_out("elb-gate-controller")
        time.sleep(3)
    report("helm upgrade (s)", round(t.timings["upgrade"], 1))
    report("upgrade under load", f"{load.summary()}; failed={load.failed}")
    for c in ("webhook", "controller"):
        after = {
            p["metadata"]["name"] for p in t.pods(c) if not p["metadata"].get("deletionTimestamp")
        }
        assert after and not after & before[c], f"{c} did not roll"
    assert load.outcomes["admission:answered"] > 0 and load.outcomes["renewal:answered"] > 0
    assert load.failed == 0, "\n".join(load.failures[:20])


def test_helm_rollback_returns_to_the_first_release_and_serves(installed: SystemTier) -> None:
    t = installed
    with Load(t, LOAD_NS) as load:
        result = t.helm("rollback", "elb-gate", "1", "-n", NAMESPACE)
        assert result.returncode == 0, result.stderr
        t.wait_rolled_out("elb-gate-webhook")
        t.wait_rolled_out("elb-gate-controller")
    report("rollback under load", f"{load.summary()}; failed={load.failed}")
    template = t.cp.admin.get("deployments", NAMESPACE, "elb-gate-webhook")["spec"]["template"]
    assert "rollout" not in (template["metadata"].get("annotations") or {})
    assert load.outcomes["admission:answered"] > 0


def test_a_killed_webhook_container_is_restarted_and_admissions_heal(installed: SystemTier) -> None:
    t = installed

    def settled() -> list[JsonObj] | None:
        # A Pod of an earlier rollout may still be terminating (its container already
        # gone from containerd): kill a serving one, once the rollout has settled.
        pods = t.pods("webhook")
        serving = [
            p
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
            and any(
                s["name"] == "webhook" and s.get("ready") and "running" in (s.get("state") or {})
                for s in (p.get("status") or {}).get("containerStatuses") or []
            )
        ]
        return serving if len(serving) == len(pods) == 2 else None

    [victim, *_] = wait_until(settled, 180, "both webhook Pods serving, none terminating")
    node = victim["spec"]["nodeName"]
    [cs] = [s for s in victim["status"]["containerStatuses"] if s["name"] == "webhook"]
    container_id = cs["containerID"].removeprefix("containerd://")
    with Load(t, LOAD_NS) as load:
        time.sleep(2)
        killed = time.monotonic()
        t.ctr(node, "tasks", "kill", "-s", "SIGKILL", container_id)

        def restarted_and_ready() -> bool:
            pod = t.cp.admin.get("pods", NAMESPACE, victim["metadata"]["name"])
            [s] = [s for s in pod["status"]["containerStatuses"] if s["name"] == "webhook"]
            return s["restartCount"] >= 1 and s["ready"]

        wait_until(restarted_and_ready, 180, "the killed webhook container back and Ready")
        healed = time.monotonic() - killed
        time.sleep(3)
    report("webhook container SIGKILL", f"Ready again after {healed:.1f}s; {load.summary()}")
    for line in load.failures[:10]:
        report("  admission failure", line)
    assert load.outcomes["admission:answered"] > 0
    # After it heals every admission is answered again.
    with Load(t, LOAD_NS) as after:
        time.sleep(5)
    assert after.failed == 0, "\n".join(after.failures[:10])


def test_draining_a_webhook_node_moves_the_replica_and_admissions_continue(
    installed: SystemTier,
) -> None:
    t = installed
    node = t.pods("webhook")[0]["spec"]["nodeName"]
    with Load(t, LOAD_NS) as load:
        began = time.monotonic()
        result = t.kubectl(
            "admin",
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
            timeout=240,
        )
        assert result.returncode == 0, result.stderr
        t.wait_ready_or_crash("webhook", 2)
        drained = time.monotonic() - began
    t.kubectl("admin", "uncordon", node)
    nodes = {p["spec"]["nodeName"] for p in t.pods("webhook")}
    report("drain of a webhook node", f"{drained:.1f}s; {load.summary()}; failed={load.failed}")
    assert node not in nodes and len(nodes) == 2
    assert load.failed == 0, "\n".join(load.failures[:10])


def test_no_packet_left_the_pod_network(installed: SystemTier) -> None:
    assert installed.egress_dropped() == 0


SENT = 10


def test_the_egress_counter_counts_what_a_pod_sends_beyond_the_bridge(
    installed: SystemTier,
) -> None:
    """The positive control of the test above: a Pod (the product's image, on a real
    node) sends SENT UDP datagrams to an address this test creates off the bridge (a
    veth into a network namespace of its own); the counter rises by them, and not one
    reaches even that namespace (dropped on the way out)."""
    t = installed
    image = t.cp.admin.get("deployments", NAMESPACE, "elb-gate-webhook")["spec"]["template"][
        "spec"
    ]["containers"][0]["image"]
    name = f"egress-control-{elb.search_id()[:8]}"
    with t.address_beyond_the_bridge() as (address, netns):
        before = t.egress_dropped()
        send = (
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for i in range({SENT}): s.sendto(b'control', ('{address}', 9))"
        )
        t.cp.admin.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "enableServiceLinks": False,
                    "containers": [
                        {
                            "name": "send",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "command": ["python", "-c", send],
                        }
                    ],
                },
            }
        )
        try:

            def done() -> str | None:
                phase = (t.cp.admin.get("pods", "default", name).get("status") or {}).get("phase")
                return phase if phase in ("Succeeded", "Failed") else None

            phase = wait_until(done, 180, f"the control Pod {name} to finish")
            counted = t.egress_dropped() - before
            received = t.ipv4_received(netns)
            logs = t.kubectl("admin", "logs", name).stdout
        finally:
            t.cp.admin.delete("pods", "default", name, grace_seconds=0)
    report("egress control", f"sent {SENT} to {address}: counted {counted}, received {received}")
    assert phase == "Succeeded", logs
    assert counted >= SENT
    assert received == 0


def test_helm_uninstall_leaves_nothing_that_can_refuse_a_request(installed: SystemTier) -> None:
    t = installed
    began = time.monotonic()
    result = t.helm("uninstall", "elb-gate", "-n", NAMESPACE, "--wait", "--timeout=180s")
    assert result.returncode == 0, result.stderr
    report("helm uninstall --wait (s)", round(time.monotonic() - began, 1))
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        assert [c["metadata"]["name"] for c in t.cp.admin.list(kind, None)] == [], (
            f"{kind} left behind"
        )
    assert t.cp.admin.list("validatingadmissionpolicies", None) == []
    # What the webhook refused is now admitted: nothing judges the namespace any more.
    job = elb.ready(elb.finalizer(elb.search_id()), GATE_A_NS)
    result = create(t, "bob", job)
    assert result.returncode == 0, result.stderr
    # and the Lease guard is gone: bob takes over alice's unexpired Lease.
    bob = t.cp.api("bob")
    lease = bob.get("leases", LOAD_NS, f"elb-blast-submit-{LOAD_NS}")
    lease["spec"]["holderIdentity"] = "openapi-0b0b0b0b0b0b4b0b8b0b0b0b0b0b0b0b"
    bob.update(lease)


def test_cold_start_what_writes_get_before_the_webhook_pods_are_ready(
    installed: SystemTier,
) -> None:
    """A fresh install: the webhook configurations exist before any webhook Pod is
    Ready. What a Job create (bob's finalizer, refused once served) and a Lease
    write (alice renewing her own Lease, admitted once served) get, in order."""
    import threading
    from collections import Counter
    from datetime import UTC, datetime

    from testbed.api import ApiError
    from testbed.clients import micro_time

    t = installed
    assert t.cp.admin.find("validatingwebhookconfigurations", None, "elb-gate") is None
    bob, alice = t.cp.api("bob"), t.cp.api("alice")
    lease_name = f"elb-blast-submit-{GATE_A_NS}"
    seen: list[tuple[float, str, str]] = []
    installer = threading.Thread(target=lambda: t.install(*VALUES), daemon=True)
    began = time.monotonic()
    installer.start()
    configured = served = None

    def outcome(call: object) -> str:
        try:
            call()  # type: ignore[operator]
            return "admitted"
        except ApiError as e:
            if DENIED in e.message:
                return "denied by the webhook"
            text = e.message
            for marker in ("no endpoints available", "connection refused", "context deadline"):
                if marker in text:
                    return f"{e.status} {marker}"
            return f"{e.status} {text[:80]}"

    def renew() -> None:
        lease = alice.get("leases", GATE_A_NS, lease_name)
        lease["spec"]["renewTime"] = micro_time(datetime.now(UTC))
        alice.update(lease)

    while time.monotonic() - began < 240 and served is None:
        now = time.monotonic() - began
        if configured is None and t.cp.admin.find(
            "validatingwebhookconfigurations", None, "elb-gate"
        ):
            configured = now
        job = outcome(lambda: bob.create(elb.ready(elb.finalizer(elb.search_id()), GATE_A_NS)))
        seen.append((now, "job", job))
        seen.append((now, "lease", outcome(renew)))
        if job == "denied by the webhook":
            served = now
        time.sleep(0.2)
    installer.join(60)
    assert configured is not None and served is not None, seen[-5:]
    window = [(k, o) for at, k, o in seen if configured <= at < served]
    report(
        "cold start: webhook configured -> first admission served (s)",
        round(served - configured, 1),
    )
    report("cold start: in that window", dict(Counter(f"{k}: {o}" for k, o in window)))
    # Fail-closed from the moment the API server has loaded the configuration:
    # once a Job has been refused for want of a webhook, none is admitted.
    first_refused = next((at for at, k, o in seen if k == "job" and o not in ("admitted",)), None)
    assert first_refused is not None
    assert not [o for at, k, o in seen if k == "job" and at >= first_refused and o == "admitted"]
    t.wait_ready_or_crash("webhook", 2)
