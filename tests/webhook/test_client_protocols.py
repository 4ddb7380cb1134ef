"""Both existing submit paths' Lease clients keep working, unchanged, against the
real API server with elb-gate's webhook in front of it.

The clients are the reproductions in :mod:`testbed.clients`: the OpenAPI
service's (``kubectl get/create/replace``, a fresh body on every write) and the
dashboard's (raw HTTP GET/POST/PUT of the object it read). The webhook runs with
short Lease bounds, so a Lease written with ``leaseDurationSeconds: 2`` can be
let expire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from elbgate.names import HOLDER_USER_ANNOTATION
from testbed.clients import (
    DashboardLeaseClient,
    LeaseClient,
    OpenApiLeaseClient,
    new_holder,
)
from testbed.controlplane import ControlPlane
from testbed.waiting import at_once
from tests.webhook.conftest import SHORT_LEASE_ENV, wait_expired

pytestmark = pytest.mark.kubectl

TWENTY_MINUTES = 20 * 60.0
Client = OpenApiLeaseClient | DashboardLeaseClient


def openapi(cp: ControlPlane, user: str, ns: str, **kwargs: Any) -> Client:
    return OpenApiLeaseClient.on(cp, user, ns, **kwargs)


def dashboard(cp: ControlPlane, user: str, ns: str, **kwargs: Any) -> Client:
    return DashboardLeaseClient.on(cp, user, ns, **kwargs)


CLIENTS: dict[str, Callable[..., Client]] = {"openapi": openapi, "dashboard": dashboard}
OTHER = {"openapi": "dashboard", "dashboard": "openapi"}


@pytest.fixture(scope="module")
def webhook_env() -> dict[str, str]:
    return SHORT_LEASE_ENV


def stored(cp: ControlPlane, ns: str) -> dict[str, Any]:
    return cp.admin.get("leases", ns, f"elb-blast-submit-{ns}")


def holder(cp: ControlPlane, ns: str) -> str:
    return str(stored(cp, ns)["spec"].get("holderIdentity") or "")


def refusal(client: Client) -> str:
    """What the client was told when its last write was refused."""
    if isinstance(client, OpenApiLeaseClient):
        return client.last_stderr
    return f"{client.last_status} {client.last_answer.get('message')}"


def dies_holding(cp: ControlPlane, ns: str, kind: str = "openapi") -> str:
    """A holder that takes the Lease for 2 s and is never heard of again; returns
    once the Lease has expired on the webhook's clock."""
    dead = CLIENTS[kind](cp, "carol", ns, ttl=2)
    assert dead.acquire() == "acquired"
    wait_expired(cp, ns)
    return dead.holder


@pytest.mark.parametrize("kind", CLIENTS)
def test_acquire_renew_and_release_work_as_before(
    control_plane: ControlPlane, ns: str, kind: str
) -> None:
    client = CLIENTS[kind](control_plane, "alice", ns)
    assert client.acquire() == "acquired"
    assert client.acquire() == "renewed"
    assert stored(control_plane, ns)["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == "alice"
    assert client.release() == "released"
    assert holder(control_plane, ns) == ""
    assert HOLDER_USER_ANNOTATION not in (
        stored(control_plane, ns)["metadata"].get("annotations") or {}
    )
    assert client.acquire() == "acquired"  # a released Lease is free at once


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_live_lease_is_busy_to_the_other_path_without_a_write(
    control_plane: ControlPlane, ns: str, kind: str
) -> None:
    owner = CLIENTS[OTHER[kind]](control_plane, "alice", ns)
    assert owner.acquire() == "acquired"
    other = CLIENTS[kind](control_plane, "bob", ns)
    assert other.acquire() == "busy"
    assert other.sent == []  # judged on its own clock: live, so nothing sent
    assert holder(control_plane, ns) == owner.holder


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_clock_ahead_client_reads_the_webhooks_409_as_busy(
    control_plane: ControlPlane, ns: str, kind: str
) -> None:
    owner = CLIENTS[OTHER[kind]](control_plane, "alice", ns)
    assert owner.acquire() == "acquired"
    ahead = CLIENTS[kind](control_plane, "bob", ns, clock_offset=TWENTY_MINUTES)
    assert ahead.acquire() == "busy"  # it thinks the Lease expired; the webhook's clock says no
    assert len(ahead.sent) == 1 and holder(control_plane, ns) == owner.holder
    said = refusal(ahead)
    assert 'admission webhook "lease-guard.elb-gate.io" denied the request' in said
    assert "cannot take it over before then" in said
    if isinstance(ahead, OpenApiLeaseClient):
        assert said.startswith('Error from server (Conflict): error when replacing "STDIN": ')
    else:
        assert said.startswith("409 ")


@pytest.mark.parametrize("kind", CLIENTS)
def test_an_expired_lease_is_taken_over(control_plane: ControlPlane, ns: str, kind: str) -> None:
    dies_holding(control_plane, ns, OTHER[kind])
    taker = CLIENTS[kind](control_plane, "bob", ns, skew=0)
    assert taker.acquire() == "acquired"
    assert holder(control_plane, ns) == taker.holder
    assert stored(control_plane, ns)["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == "bob"


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_release_by_another_user_is_refused_as_busy(
    control_plane: ControlPlane, ns: str, kind: str
) -> None:
    owner = CLIENTS[OTHER[kind]](control_plane, "alice", ns)
    assert owner.acquire() == "acquired"
    # bob's client was handed alice's holder identity (a misconfiguration, or malice).
    impostor = CLIENTS[kind](control_plane, "bob", ns, holder=owner.holder)
    assert impostor.release() == "busy"  # refused twice: once, then once more after a re-read
    assert len(impostor.sent) == 2
    said = refusal(impostor)
    assert "lease-guard.elb-gate.io" in said and "may not release it" in said
    assert holder(control_plane, ns) == owner.holder


def test_deleting_a_live_lease_is_refused(control_plane: ControlPlane, ns: str) -> None:
    assert DashboardLeaseClient.on(control_plane, "alice", ns).acquire() == "acquired"
    result = control_plane.kubectl("alice", "-n", ns, "delete", "lease", f"elb-blast-submit-{ns}")
    assert result.returncode == 1
    assert result.stderr.startswith("Error from server (Conflict): ")
    assert "never deleted" in result.stderr


@pytest.mark.parametrize("start", ["absent", "expired"])
@pytest.mark.parametrize(
    "pair",
    [("openapi", "dashboard"), ("dashboard", "dashboard"), ("openapi", "openapi")],
    ids=["openapi-vs-dashboard", "dashboard-vs-dashboard", "openapi-vs-openapi"],
)
def test_two_clients_racing_never_both_hold_the_lease(
    control_plane: ControlPlane, ns: str, start: str, pair: tuple[str, str]
) -> None:
    cp = control_plane
    first = CLIENTS[pair[0]](cp, "alice", ns, skew=0)
    second = CLIENTS[pair[1]](cp, "bob", ns, skew=0)
    for _round in range(2):
        if start == "expired":  # a third holder died holding it
            dies_holding(cp, ns)
        outcomes = at_once([first.acquire, second.acquire])
        assert sorted(map(str, outcomes)) == ["acquired", "busy"], outcomes
        winner: LeaseClient = first if outcomes[0] == "acquired" else second
        assert holder(cp, ns) == winner.holder
        assert winner.release() == "released"
        if start == "absent":
            cp.admin.delete("leases", ns, f"elb-blast-submit-{ns}")


def test_each_acquisition_has_its_own_full_uuid_holder_identity() -> None:
    seen = {new_holder("openapi") for _ in range(1000)} | {
        new_holder("dashboard") for _ in range(1000)
    }
    assert len(seen) == 2000
    assert all(h.split("-", 1)[0] in ("openapi", "dashboard") for h in seen)
    assert all(len(h.split("-", 1)[1]) == 32 for h in seen)
