"""What each existing client does on the wire that elb-gate must live with, and
whether it changes any outcome.

One test per difference, each with the real client reproduction
(:mod:`testbed.clients`) under its production identity: the OpenAPI service
as the ServiceAccount of a Pod (bound token), the dashboard as
``dashboard-lease`` for the Lease and ``dashboard-apply`` for ``kubectl create``
(one submitter in the identity file, recognised by its holder prefix).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

import testbed.clients
from elbgate.lease import parse_microtime
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION
from testbed import elastic_blast as elb
from testbed.api import JsonObj
from testbed.audit_log import requests_to
from testbed.clients import (
    ClientError,
    DashboardLeaseClient,
    OpenApiLeaseClient,
    micro_time,
)
from testbed.controlplane import ControlPlane, PodIdentity
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.webhook.conftest import SHORT_LEASE_ENV, decisions, wait_expired

pytestmark = pytest.mark.kubectl

SUBMITTERS = """\
submitters:
  - name: dashboard
    holderPrefix: dashboard-
    groups: [dashboard]
"""
"""The dashboard takes the Lease as ``dashboard-lease`` and creates Jobs as
``dashboard-apply``; both are in group ``dashboard``."""

Client = OpenApiLeaseClient | DashboardLeaseClient


@pytest.fixture(scope="module")
def webhook_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Short Lease bounds, no skew, and the dashboard's two credentials mapped."""
    identities = tmp_path_factory.mktemp("identities") / "submitters.yaml"
    identities.write_text(SUBMITTERS)
    return {**SHORT_LEASE_ENV, "ELB_GATE_SUBMITTER_IDENTITIES_FILE": str(identities)}


@pytest.fixture
def openapi_pod(control_plane: ControlPlane, ns: str) -> PodIdentity:
    """The OpenAPI service's Pod and its bound token."""
    return control_plane.pod_identity(ns, "elb-openapi")


class Path:
    """One submit path: its Lease client and the credential it creates Jobs with."""

    def __init__(self, client: Client, creates_as: str, kubeconfig: str | None = None) -> None:
        self.client = client
        self.creates_as = creates_as
        self.kubeconfig = kubeconfig

    def create_finalizer(self, cp: ControlPlane, ns: str) -> Any:
        return cp.kubectl(
            self.creates_as,
            "create",
            "-f",
            "-",
            input=json.dumps(elb.ready(elb.finalizer(elb.search_id()), ns)),
            kubeconfig=self.kubeconfig,
        )


def path(kind: str, cp: ControlPlane, ns: str, pod: PodIdentity, **kwargs: Any) -> Path:
    """The OpenAPI service (its Pod's token for both) or the dashboard (two users)."""
    if kind == "openapi":
        client: Client = OpenApiLeaseClient.on(cp, pod, ns, **kwargs)
        return Path(client, "", pod.kubeconfig)
    return Path(DashboardLeaseClient.on(cp, "dashboard-lease", ns, **kwargs), "dashboard-apply")


def stored(cp: ControlPlane, ns: str) -> JsonObj:
    return cp.admin.get("leases", ns, f"elb-blast-submit-{ns}")


def lease_writes(cp: ControlPlane, ns: str, user: str) -> list[JsonObj]:
    """The audit log's record of ``user``'s completed writes to the submit Lease."""
    name = f"elb-blast-submit-{ns}"
    return requests_to(cp.audit_events(), "leases", ns, name, user=user, verbs=("create", "update"))


# -- the OpenAPI client writes a fresh body every time ---------------------------------


def test_a_fresh_body_on_renew_drops_the_stamps_and_the_webhook_carries_them_over(
    control_plane: ControlPlane, ns: str, openapi_pod: PodIdentity
) -> None:
    cp = control_plane
    openapi = path("openapi", cp, ns, openapi_pod)
    assert openapi.client.acquire() == "acquired"
    stamps = {
        HOLDER_USER_ANNOTATION: openapi_pod.username,
        HOLDER_POD_ANNOTATION: openapi_pod.stamp,
    }
    assert stored(cp, ns)["metadata"]["annotations"] == stamps
    assert openapi.client.acquire() == "renewed"
    # On the wire (as the API server recorded the request): no annotations at all.
    renew = wait_until(
        lambda: [e for e in lease_writes(cp, ns, openapi_pod.username) if e["verb"] == "update"],
        30,
        "the audit record of the renew",
    )[-1]
    assert "annotations" not in renew["requestObject"]["metadata"]
    # Stored: the same stamps, carried over from the old object by the webhook.
    assert stored(cp, ns)["metadata"]["annotations"] == stamps
    # Outcome: none changed. The holder's finalizer passes Gate A, and the other
    # path is still busy.
    result = openapi.create_finalizer(cp, ns)
    assert result.returncode == 0, result.stderr
    assert DashboardLeaseClient.on(cp, "dashboard-lease", ns).acquire() == "busy"


# -- both clients reset acquireTime on a renew -------------------------------------------


@pytest.mark.parametrize("kind", ["openapi", "dashboard"])
def test_an_acquire_time_reset_on_renew_is_replaced_by_the_stamped_one_and_changes_no_decision(
    control_plane: ControlPlane, ns: str, openapi_pod: PodIdentity, kind: str
) -> None:
    cp = control_plane
    # An hour ahead: what the client writes is easy to tell from the webhook's clock.
    mine = path(kind, cp, ns, openapi_pod, clock_offset=3600)
    assert mine.client.acquire() == "acquired"
    acquired = stored(cp, ns)["spec"]
    assert acquired["acquireTime"] == acquired["renewTime"]  # both the webhook's
    assert mine.client.acquire() == "renewed"
    sent = mine.client.sent[-1]["spec"]
    after = stored(cp, ns)["spec"]
    # The client reset acquireTime on its own clock, an hour ahead; the stamp sets
    # renewTime on the webhook's clock and, the holder being unchanged, carries the
    # stamped acquisition time over: one clock in the stored Lease.
    assert sent["acquireTime"] != acquired["acquireTime"]
    assert after["acquireTime"] == acquired["acquireTime"]
    renewed = parse_microtime(after["renewTime"])
    assert isinstance(renewed, datetime)
    assert abs((renewed - datetime.now(UTC)).total_seconds()) < 60
    # Outcome: none changed. No rule reads acquireTime: the Lease is live on the
    # webhook's clock, the holder passes Gate A, the other path is busy.
    other = path("dashboard" if kind == "openapi" else "openapi", cp, ns, openapi_pod)
    assert other.client.acquire() == "busy"
    result = mine.create_finalizer(cp, ns)
    assert result.returncode == 0, result.stderr


# -- both clients allow 30 s of clock skew -----------------------------------------------


@pytest.mark.parametrize("kind", ["openapi", "dashboard"])
def test_the_clients_skew_margin_only_delays_their_own_takeover(
    control_plane: ControlPlane, ns: str, openapi_pod: PodIdentity, kind: str
) -> None:
    cp = control_plane
    dead = OpenApiLeaseClient.on(cp, "carol", ns, ttl=2)
    assert dead.acquire() == "acquired"
    wait_expired(cp, ns)  # expired on the webhook's clock (this webhook allows no skew)
    patient = path(kind, cp, ns, openapi_pod)
    assert patient.client.acquire() == "busy"  # renewTime + 2 s + 30 s not reached
    assert patient.client.sent == []  # decided on its own clock: nothing sent
    # The same client 31 s ahead is past the margin: it writes, and the webhook,
    # whose clock says the Lease expired, lets it take over.
    ahead = path(kind, cp, ns, openapi_pod, clock_offset=31, holder=patient.client.holder)
    assert ahead.client.acquire() == "acquired"
    assert stored(cp, ns)["spec"]["holderIdentity"] == patient.client.holder


# -- holderIdentity = <source>-<uuid4 hex> -----------------------------------------------


def test_the_dashboard_holder_prefix_maps_its_two_credentials_and_cannot_be_borrowed(
    control_plane: ControlPlane, ns: str, openapi_pod: PodIdentity
) -> None:
    cp = control_plane
    dashboard = path("dashboard", cp, ns, openapi_pod)
    assert dashboard.client.holder.startswith("dashboard-")
    assert dashboard.client.acquire() == "acquired"
    # The Lease is stamped with dashboard-lease; dashboard-apply creates the Job.
    result = dashboard.create_finalizer(cp, ns)
    assert result.returncode == 0, result.stderr
    assert dashboard.client.release() == "released"
    # Someone else using the dashboard's prefix is refused with 403, which both
    # clients read as an error, never as busy.
    for borrowed in (
        DashboardLeaseClient.on(cp, "alice", ns),
        OpenApiLeaseClient.on(cp, "alice", ns, holder=dashboard.client.holder),
    ):
        with pytest.raises(ClientError, match="carries the holderPrefix 'dashboard-'"):
            borrowed.acquire()
    assert stored(cp, ns)["spec"]["holderIdentity"] == ""


# -- MicroTimes with six fractional digits ------------------------------------------------


def three_digits(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@pytest.mark.parametrize("kind", ["openapi", "dashboard"])
def test_a_microtime_with_other_than_six_digits_is_an_outage_the_webhook_never_sees(
    control_plane: ControlPlane,
    hook: WebhookProcess,
    ns: str,
    openapi_pod: PodIdentity,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert micro_time(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000000Z"
    mine = path(kind, control_plane, ns, openapi_pod)
    monkeypatch.setattr(testbed.clients, "micro_time", three_digits)
    with pytest.raises(ClientError, match=r'cannot parse "\.\d{3}Z" as "\.000000"'):
        mine.client.acquire()
    assert control_plane.admin.find("leases", ns, f"elb-blast-submit-{ns}") is None
    assert decisions(hook, ns) == []  # refused (400) before admission


# -- a write to a Lease deleted under the client -----------------------------------------


@pytest.mark.parametrize("kind", ["openapi", "dashboard"])
def test_a_takeover_of_a_lease_deleted_meanwhile_ends_in_a_create_admission(
    control_plane: ControlPlane,
    hook: WebhookProcess,
    ns: str,
    openapi_pod: PodIdentity,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp = control_plane
    dead = OpenApiLeaseClient.on(cp, "carol", ns, ttl=2)
    assert dead.acquire() == "acquired"
    wait_expired(cp, ns)
    taker = path(kind, cp, ns, openapi_pod, skew=0)
    read = taker.client.get()  # the client reads the expired Lease...
    cp.admin.delete("leases", ns, f"elb-blast-submit-{ns}")  # ...an operator deletes it...
    with monkeypatch.context() as stale:
        stale.setattr(taker.client, "get", lambda: read)
        outcome = taker.client.acquire()  # ...and then it writes what it decided on
    if kind == "openapi":
        # Its fresh body (old resourceVersion, no uid) makes the real API server
        # turn the update of a missing Lease into a create: the client's code
        # reads "not found" as busy, but it never gets one; it holds the Lease.
        assert outcome == "acquired"
    else:
        # The object it read carries the deleted Lease's uid: the API server
        # answers 409 (uid precondition), busy; its next attempt creates it.
        assert outcome == "busy"
        assert isinstance(taker.client, DashboardLeaseClient)
        assert taker.client.last_status == 409
        assert "Precondition failed: UID in precondition" in str(
            taker.client.last_answer.get("message")
        )
        assert taker.client.acquire() == "acquired"
    lease = stored(cp, ns)
    assert lease["spec"]["holderIdentity"] == taker.client.holder
    user = openapi_pod.username if kind == "openapi" else "dashboard-lease"
    assert lease["metadata"]["annotations"][HOLDER_USER_ANNOTATION] == user
    creates = [
        r
        for r in decisions(hook, ns)
        if r["operation"] == "CREATE" and r.get("user") == user and r["name"] == lease_name(ns)
    ]
    assert creates, "the PUT was not admitted as a CREATE"


def lease_name(ns: str) -> str:
    return f"elb-blast-submit-{ns}"
