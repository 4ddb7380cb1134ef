"""Both existing submit paths' Lease clients keep working, unchanged, against emulator + webhook."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from elbgate.lease import format_microtime
from elbgate.names import HOLDER_USER_ANNOTATION
from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl
from tests.webhook.lease_clients import KubectlLeaseClient, Outcome, RawHttpLeaseClient

pytestmark = pytest.mark.kubectl

OPENAPI = "openapi-6a1c0e6b5f8f4b83a1d2c3e4f5a6b7c8"
DASHBOARD = "dashboard-1f2e3d4c5b6a47989a8b7c6d5e4f3a2b"
TWENTY_MINUTES = 20 * 60.0

Client = RawHttpLeaseClient | KubectlLeaseClient
Factory = Callable[..., Client]
CLIENTS: dict[str, Factory] = {"raw HTTP": RawHttpLeaseClient, "kubectl": KubectlLeaseClient}


def stored(emu: Emulator, ns: str) -> dict[str, Any]:
    return emu.get("leases", ns, f"elb-blast-submit-{ns}")


def holder(emu: Emulator, ns: str) -> str:
    return str(stored(emu, ns)["spec"].get("holderIdentity") or "")


def expire(emu: Emulator, ns: str) -> None:
    """Age the stored Lease past TTL + skew, as if its holder died an hour ago."""

    def age(obj: dict[str, Any]) -> None:
        obj["spec"]["renewTime"] = format_microtime(datetime.now(UTC) - timedelta(hours=1))

    emu.patch("leases", ns, f"elb-blast-submit-{ns}", age)


@pytest.mark.parametrize("kind", CLIENTS)
def test_acquire_renew_and_release_work_as_before(emu: Emulator, ns: str, kind: str) -> None:
    client = CLIENTS[kind](emu, "alice", ns, OPENAPI)
    assert client.acquire() == "acquired"
    assert client.acquire() == "renewed"
    assert stored(emu, ns)["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == "alice"
    assert client.release() == "released"
    assert holder(emu, ns) == ""
    assert HOLDER_USER_ANNOTATION not in (stored(emu, ns)["metadata"].get("annotations") or {})


def test_a_put_without_annotations_keeps_the_stamp(emu: Emulator, ns: str) -> None:
    client = RawHttpLeaseClient(emu, "alice", ns, OPENAPI)
    assert client.acquire() == "acquired"
    first = stored(emu, ns)["spec"]["renewTime"]
    assert client.acquire() == "renewed"  # a PUT built from scratch: no annotations at all
    after = stored(emu, ns)
    assert after["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == "alice"
    assert after["spec"]["renewTime"] >= first


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_live_lease_is_busy_to_the_other_path(emu: Emulator, ns: str, kind: str) -> None:
    assert RawHttpLeaseClient(emu, "alice", ns, OPENAPI).acquire() == "acquired"
    assert CLIENTS[kind](emu, "bob", ns, DASHBOARD).acquire() == "busy"
    assert holder(emu, ns) == OPENAPI


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_clock_ahead_client_reads_the_webhooks_409_as_busy(
    emu: Emulator, ns: str, kind: str
) -> None:
    assert RawHttpLeaseClient(emu, "alice", ns, OPENAPI).acquire() == "acquired"
    ahead = CLIENTS[kind](emu, "bob", ns, DASHBOARD, clock_offset=TWENTY_MINUTES)
    assert ahead.acquire() == "busy"  # it thinks the Lease expired; the webhook's clock says no
    assert holder(emu, ns) == OPENAPI
    if isinstance(ahead, KubectlLeaseClient):
        assert "Error from server (Conflict)" in ahead.last_stderr
        assert 'admission webhook "lease-guard.elb-gate.io" denied the request' in (
            ahead.last_stderr
        )


@pytest.mark.parametrize("kind", CLIENTS)
def test_an_expired_lease_is_taken_over(emu: Emulator, ns: str, kind: str) -> None:
    assert RawHttpLeaseClient(emu, "alice", ns, OPENAPI).acquire() == "acquired"
    expire(emu, ns)
    assert CLIENTS[kind](emu, "bob", ns, DASHBOARD).acquire() == "acquired"
    assert holder(emu, ns) == DASHBOARD
    assert stored(emu, ns)["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == "bob"


def test_a_release_by_another_user_is_refused_as_busy(emu: Emulator, ns: str) -> None:
    assert RawHttpLeaseClient(emu, "alice", ns, OPENAPI).acquire() == "acquired"
    # bob's client was handed alice's holder identity (a misconfiguration, or malice).
    impostor = KubectlLeaseClient(emu, "bob", ns, OPENAPI)
    assert impostor.release() == "busy"
    assert "lease-guard.elb-gate.io" in impostor.last_stderr
    assert "may not release it" in impostor.last_stderr
    assert holder(emu, ns) == OPENAPI


def test_deleting_a_live_lease_is_refused(emu: Emulator, ns: str) -> None:
    assert RawHttpLeaseClient(emu, "alice", ns, OPENAPI).acquire() == "acquired"
    result = kubectl(emu, "alice", "-n", ns, "delete", "lease", f"elb-blast-submit-{ns}")
    assert result.returncode == 1
    assert "Error from server (Conflict)" in result.stderr and "never deleted" in result.stderr


def race(*attempts: Callable[[], Outcome]) -> list[Outcome]:
    """Run the attempts at once (released together by a barrier)."""
    barrier = threading.Barrier(len(attempts))
    outcomes: list[Any] = [None] * len(attempts)

    def run(i: int) -> None:
        barrier.wait(30)
        try:
            outcomes[i] = attempts[i]()
        except Exception as exc:  # surfaced by the assertion below
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(attempts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return outcomes


@pytest.mark.parametrize("start", ["absent", "expired"])
@pytest.mark.parametrize(
    "pair",
    [("raw HTTP", "kubectl"), ("raw HTTP", "raw HTTP"), ("kubectl", "kubectl")],
    ids=["raw-vs-kubectl", "raw-vs-raw", "kubectl-vs-kubectl"],
)
def test_two_clients_racing_never_both_hold_the_lease(
    emu: Emulator, ns: str, start: str, pair: tuple[str, str]
) -> None:
    first = CLIENTS[pair[0]](emu, "alice", ns, OPENAPI)
    second = CLIENTS[pair[1]](emu, "bob", ns, DASHBOARD)
    dead = RawHttpLeaseClient(emu, "openapi", ns, "worker-0f4e9c2b7a1d4e6f8a3b5c7d9e1f2a3b")
    for _round in range(2):
        if start == "expired":  # a third holder died holding it
            assert dead.acquire() == "acquired"
            expire(emu, ns)
        outcomes = race(first.acquire, second.acquire)
        assert sorted(map(str, outcomes)) == ["acquired", "busy"], outcomes
        winner = first if outcomes[0] == "acquired" else second
        assert holder(emu, ns) == winner.holder
        assert winner.release() == "released"
        if start == "absent":
            emu.delete("leases", ns, f"elb-blast-submit-{ns}")
