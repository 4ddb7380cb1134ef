"""A cold start as a stopped AKS cluster sees it: the API server answers, the nodes
are up, the webhook configurations are in place (they survive the stop) and
elb-gate's webhook Pods are only starting. What each real client's exact call gets
until elb-gate admits: the dashboard's Lease write (raw HTTPS), the OpenAPI
service's (``kubectl``) and a search Job.

The start is the webhook Deployment scaled from 0 to its replicas: the Pods are
scheduled, their containers created and started, Python starts, the kubelet's
readiness probe passes and the EndpointSlice the API server dials turns ready —
what a node coming back after ``az aks start`` does for each Pod.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from elbgate.names import ADMISSION_READY_LEASE
from testbed import elastic_blast as elb
from testbed.api import ApiError
from testbed.clients import ClientError, DashboardLeaseClient, OpenApiLeaseClient, is_expired
from testbed.system_tier import NAMESPACE, SystemTier
from testbed.waiting import wait_until
from tests.system.conftest import VALUES
from tests.system.load import DENIED

pytestmark = [pytest.mark.system, pytest.mark.kubectl, pytest.mark.timeout(1500)]

DASHBOARD_NS, OPENAPI_NS, JOB_NS = "st-gate-a", "st-gate-b", "st-load"
ROUNDS = 3
WEBHOOK = "deployment/elb-gate-webhook"
API_MESSAGE = 'failed calling webhook "lease-stamp.elb-gate.io"'
"""The API server's own answer while no webhook replica serves (elb-gate cannot word it)."""


def report(name: str, value: object) -> None:
    print(f"\nSYSTEM-TIER cold start: {name}: {value}")


@dataclass
class Seen:
    """What one client's calls got, in order: (seconds since the start, answer)."""

    calls: list[tuple[float, str]] = field(default_factory=list)
    admitted: float | None = None
    first: str = ""
    """The first refusal, word for word (what docs/clients.md quotes)."""


@dataclass
class Round:
    clients: dict[str, Seen]
    pods: dict[str, float]
    """When the first webhook Pod was created, running, logged ``listening``, was Ready,
    the first EndpointSlice address turned ready, and the readiness key first read as
    serving (seconds since the start)."""


@pytest.fixture(scope="module")
def installed(tier: SystemTier) -> Iterator[SystemTier]:
    result = tier.install(*VALUES)
    assert result.returncode == 0, result.stderr
    tier.wait_ready_or_crash("webhook", 2)
    tier.wait_ready_or_crash("controller", 2)
    yield tier


def scale(t: SystemTier, replicas: int) -> None:
    result = t.kubectl("admin", "-n", NAMESPACE, "scale", WEBHOOK, f"--replicas={replicas}")
    assert result.returncode == 0, result.stderr


def key_serving(t: SystemTier, namespace: str) -> bool:
    """The readiness key as a client reads it: held, and unexpired on the client's clock
    (the clients' own Lease rule; no skew — one clock here)."""
    lease = t.cp.api("alice").find("leases", namespace, ADMISSION_READY_LEASE)
    spec = (lease or {}).get("spec") or {}
    return bool(spec.get("holderIdentity")) and not is_expired(
        spec, datetime.now(UTC), skew=0, default_ttl=0
    )


def stop_webhook(t: SystemTier) -> None:
    scale(t, 0)
    wait_until(lambda: not t.pods("webhook"), 180, "no webhook Pod left")
    wait_until(lambda: not t.ready_endpoints("elb-gate-webhook"), 60, "no ready endpoint")
    for ns in (DASHBOARD_NS, OPENAPI_NS, JOB_NS):
        wait_until(lambda: not key_serving(t, ns), 120, f"the readiness key in {ns} lapsed")  # noqa: B023


def listening_at(t: SystemTier, pod: str) -> tuple[float, float] | None:
    """Wall-clock time the webhook in ``pod`` logged ``listening`` (the kubelet's
    timestamp: the nodes run on this host, one clock), and the process's own age then
    (interpreter, imports and set-up)."""
    logs = t.kubectl("admin", "-n", NAMESPACE, "logs", pod, "--timestamps")
    for line in logs.stdout.splitlines():
        stamp, _, text = line.partition(" ")
        record = json.loads(text) if text.startswith("{") else {}
        if record.get("msg") == "listening":
            whole, _, fraction = stamp.rstrip("Z").partition(".")
            moment = datetime.fromisoformat(whole).replace(tzinfo=UTC)
            return moment.timestamp() + float(f"0.{fraction or 0}"), record["started_in_seconds"]
    return None


def short(text: str) -> str:
    """An answer without what differs per call (names, addresses, holders)."""
    for marker in (
        "no endpoints available",
        "connection refused",
        "context deadline exceeded",
        "i/o timeout",
        "no route to host",
    ):
        if marker in text:
            head = text.split(": failed to call webhook")[0]
            return f"{head}: … {marker}"
    return text[:240]


def dashboard_call(c: DashboardLeaseClient) -> str | None:
    """The dashboard's acquire; ``None`` when admitted (then released again)."""
    try:
        outcome = c.acquire()
    except ClientError as e:
        return f"lease_api_error ({e})"
    if outcome == "busy":
        return f"submit_slot_busy ({c.last_status} {c.last_answer.get('message')})"
    c.release()
    return None


def openapi_call(c: OpenApiLeaseClient) -> str | None:
    try:
        outcome = c.acquire()
    except ClientError as e:
        return f"SubmitCoordinationError ({e})"
    if outcome == "busy":
        return f"busy ({c.last_stderr.strip()})"
    c.release()
    return None


def cold_start(t: SystemTier) -> Round:
    """Scale the webhook from 0 and watch every client until each is admitted."""
    stop_webhook(t)
    dashboard = DashboardLeaseClient.on(t.cp, "alice", DASHBOARD_NS)
    openapi = OpenApiLeaseClient.on(t.cp, "alice", OPENAPI_NS)
    bob = t.cp.api("bob")

    def job_call() -> str | None:
        try:
            bob.create(elb.ready(elb.finalizer(elb.search_id()), JOB_NS))
        except ApiError as e:
            if e.status == 403 and DENIED in e.message:
                return None  # judged by elb-gate: Gate A refuses bob, as it should
            return f"{e.status} {e.message}"
        return "admitted without the webhook"

    calls: dict[str, Callable[[], str | None]] = {
        "dashboard Lease": lambda: dashboard_call(dashboard),
        "openapi Lease": lambda: openapi_call(openapi),
        "search Job": job_call,
    }
    seen = {name: Seen() for name in calls}
    pods: dict[str, float] = {}
    done = threading.Event()
    began, began_wall = time.monotonic(), time.time()

    def run(name: str) -> None:
        while not done.is_set() and time.monotonic() - began < 240:
            at = time.monotonic() - began
            answer = calls[name]()
            if answer is None:
                seen[name].admitted = at
                return
            seen[name].first = seen[name].first or answer
            seen[name].calls.append((at, short(answer)))
            time.sleep(0.1)

    def watch_pods() -> None:
        while not done.is_set():
            at = time.monotonic() - began
            for pod in t.pods("webhook"):
                pods.setdefault("created", at)
                for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                    if (cs.get("state") or {}).get("running"):
                        pods.setdefault("running", at)
                    if cs.get("ready"):
                        pods.setdefault("ready", at)
            if t.ready_endpoints("elb-gate-webhook"):
                pods.setdefault("endpoint", at)
            if "key" not in pods and key_serving(t, DASHBOARD_NS):
                pods["key"] = at
            time.sleep(0.1)

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in calls]
    watcher = threading.Thread(target=watch_pods, daemon=True)
    scale(t, 2)
    for th in [*threads, watcher]:
        th.start()
    for th in threads:
        th.join(300)
    wait_until(lambda: "key" in pods, 120, "the readiness key read as serving")
    done.set()
    watcher.join(10)
    heard = [h for p in t.pods("webhook") if (h := listening_at(t, p["metadata"]["name"]))]
    if heard:
        at, age = min(heard)
        pods["listening"] = at - began_wall
        pods["process start -> listening"] = age
    return Round(seen, pods)


def summarise(label: str, rounds: list[Round]) -> dict[str, float]:
    """Print each client's window and answers; return the median window per client."""
    medians: dict[str, float] = {}
    for name in rounds[0].clients:
        windows = [r.clients[name].admitted for r in rounds]
        assert all(w is not None for w in windows), (name, [r.clients[name].calls for r in rounds])
        medians[name] = statistics.median(w for w in windows if w is not None)
        report(
            f"{label}: {name}: start -> first admission (s)", [round(w or 0, 1) for w in windows]
        )
        answers: dict[str, int] = {}
        for r in rounds:
            for _, a in r.clients[name].calls:
                answers[a] = answers.get(a, 0) + 1
        report(f"{label}: {name}: answers in the window", answers)
        report(f"{label}: {name}: the first, word for word", rounds[0].clients[name].first)
    for step in ("created", "running", "listening", "ready", "endpoint", "key"):
        report(
            f"{label}: first webhook Pod {step} (s)",
            [round(r.pods.get(step, -1), 1) for r in rounds],
        )
    report(
        f"{label}: its process start -> listening (s)",
        [r.pods.get("process start -> listening") for r in rounds],
    )
    return medians


def check_fail_closed(rounds: list[Round]) -> None:
    """Whatever the window held, nothing was admitted without the webhook, and
    every refusal of a Lease write is the API server's 'failed calling webhook'."""
    for r in rounds:
        for name, s in r.clients.items():
            assert s.admitted is not None
            assert not [a for _, a in s.calls if "admitted without the webhook" in a]
            for _, a in s.calls:
                if "Lease" in name:
                    assert API_MESSAGE in a, a
        # The readiness key never reads as serving before a replica does.
        assert r.pods["key"] >= r.pods["running"], r.pods


def test_the_window_with_the_former_readiness_period(installed: SystemTier) -> None:
    """The readiness probe every 5 s (the chart before 1 s): the baseline."""
    t = installed
    result = t.install(
        *VALUES,
        "webhook.readinessProbe.periodSeconds=5",
        "webhook.readinessProbe.failureThreshold=2",
        action="upgrade",
    )
    assert result.returncode == 0, result.stderr
    t.wait_rolled_out("elb-gate-webhook")
    rounds = [cold_start(t) for _ in range(ROUNDS)]
    summarise("readiness every 5 s", rounds)
    check_fail_closed(rounds)


def test_the_window_as_the_chart_ships_it(installed: SystemTier) -> None:
    """The chart's defaults: what an operator's cold start sees."""
    t = installed
    result = t.install(*VALUES, action="upgrade")
    assert result.returncode == 0, result.stderr
    t.wait_rolled_out("elb-gate-webhook")
    rounds = [cold_start(t) for _ in range(ROUNDS)]
    summarise("as shipped", rounds)
    check_fail_closed(rounds)
