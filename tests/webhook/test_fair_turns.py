"""Fair turns (``ELB_GATE_FAIR_TURNS=on``) through the real admission chain.

Two webhook replicas, the two real clients' Lease protocols (:mod:`testbed.clients`) with
real identities: the dashboard's token-file user over raw HTTPS, the OpenAPI service's
ServiceAccount token bound to a running Pod through ``kubectl``. Every Lease write goes
through the API server to a replica over TLS; the test bed's router in front of them
(:mod:`testbed.router`) sends each client's writes to the other replica than the last
client's, so consecutive attempts are judged by alternate replicas and only the record
in the API server carries the waiting line.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest

from testbed import elastic_blast as elb
from testbed.clients import DashboardLeaseClient, OpenApiLeaseClient, new_holder
from testbed.controlplane import ControlPlane
from testbed.rig import Rig
from testbed.waiting import wait_until
from tests.webhook.conftest import API_TIMEOUT_SECONDS

pytestmark = [pytest.mark.kubectl, pytest.mark.timeout(600)]

DASHBOARD = "dashboard-lease"
OPENAPI_SA = "elb-openapi"
HOLD_SECONDS = 4
"""The turn kept for a path that does not come lapses this soon (the vanishing waiter)."""

IDENTITIES = f"""\
submitters:
  - name: dashboard
    holderPrefix: dashboard-
    users: [{DASHBOARD}]
  - name: openapi
    holderPrefix: openapi-
    groups: [system:serviceaccounts]
"""


@pytest.fixture(scope="module")
def rig(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    path = tmp_path_factory.mktemp("identities") / "submitters.yaml"
    path.write_text(IDENTITIES)
    env = {
        "ELB_GATE_API_TIMEOUT_SECONDS": str(API_TIMEOUT_SECONDS),
        "ELB_GATE_SUBMITTER_IDENTITIES_FILE": str(path),
        "ELB_GATE_FAIR_TURNS": "on",
        "ELB_GATE_FAIR_TURN_HOLD_SECONDS": str(HOLD_SECONDS),
    }
    with Rig(control_plane, [], controllers=0, env=env, per_request=True) as started:
        yield started


class Paths:
    """One gated namespace at its ceiling (3 searches running, created before gating),
    its submit Lease created and released, and a client of each path."""

    def __init__(self, cp: ControlPlane, rig: Rig) -> None:
        self.cp, self.rig = cp, rig
        self._replicas = itertools.cycle(range(len(rig.hooks)))
        namespace = cp.new_namespace("fair")
        self.searches = [
            elb.ready(elb.blast_batch(elb.search_id(), 0), namespace) for _ in range(3)
        ]
        for job in self.searches:
            cp.admin.create(job)
        self.ns = rig.install.gate(namespace)
        self.openapi_pod = cp.pod_identity(self.ns, OPENAPI_SA)
        first = self.dashboard()
        assert first.acquire() == "acquired"  # the CREATE (not judged)
        assert first.release() == "released"

    def next_replica(self) -> None:
        """The next client's requests go to the next replica."""
        assert self.rig.router is not None
        self.rig.router.pin(self.ns, next(self._replicas))

    def dashboard(self) -> DashboardLeaseClient:
        """The dashboard mints a fresh holder for every attempt."""
        self.next_replica()
        return DashboardLeaseClient.on(self.cp, DASHBOARD, self.ns)

    def openapi(self, holder: str | None = None) -> OpenApiLeaseClient:
        self.next_replica()
        return OpenApiLeaseClient.on(self.cp, self.openapi_pod, self.ns, holder=holder)

    def capacity_poll(self) -> None:
        """A dashboard task at the ceiling tries the free Lease: refused as busy (its
        count would show 3/3), and in line."""
        client = self.dashboard()
        assert client.acquire() == "busy"
        assert client.last_status == 409
        message = str(client.last_answer.get("message") or "")
        assert "no search slot is free" in message and "(3/3 active searches)" in message
        assert self.holder() == ""

    def free_a_slot(self) -> None:
        self.cp.admin.delete("jobs", self.ns, self.searches.pop()["metadata"]["name"])

    def holder(self) -> str:
        lease = self.cp.admin.get("leases", self.ns, f"elb-blast-submit-{self.ns}")
        return str(lease["spec"].get("holderIdentity") or "")

    def turns(self) -> dict[str, object]:
        found = self.cp.admin.find("configmaps", self.ns, "elb-gate-turns")
        assert found is not None, "no fair-turn record was written"
        return dict(json.loads(found["data"]["waiting.json"]))

    def judged(self) -> list[tuple[int, str, str]]:
        """(replica, reason, turn) of every Lease-guard decision that went through the rule."""
        out = []
        for index, replica in enumerate(self.rig.hooks):
            for line in replica.log().splitlines():
                if not line.startswith("{"):
                    continue
                record = json.loads(line)
                details = record.get("details") or {}
                if record.get("namespace") == self.ns and "turn" in details:
                    out.append((index, str(record.get("reason")), str(details["turn"])))
        return out


@pytest.fixture
def paths(control_plane: ControlPlane, rig: Rig) -> Paths:
    return Paths(control_plane, rig)


def test_the_free_turn_goes_to_the_path_that_waited_longest_across_two_replicas(
    paths: Paths,
) -> None:
    # The dashboard waits at the ceiling; its 30 s poll shows itself to the webhook.
    paths.capacity_poll()
    assert "dashboard" in paths.turns()["paths"]  # type: ignore[operator]
    paths.free_a_slot()
    # The OpenAPI dispatcher's 5 s poll comes first to the free turn: refused as busy.
    openapi = paths.openapi()
    assert openapi.acquire() == "busy"
    assert "(Conflict)" in openapi.last_stderr
    assert "the next free turn is kept for submit path `dashboard`" in openapi.last_stderr
    assert "path `openapi`" in openapi.last_stderr
    assert paths.holder() == ""
    # The dashboard's next poll takes the turn kept for it.
    dashboard = paths.dashboard()
    assert dashboard.acquire() == "acquired"
    assert paths.holder() == dashboard.holder
    # Served: the dashboard leaves the line, the OpenAPI path is now first.
    waiting = paths.turns()["paths"]
    assert isinstance(waiting, dict) and set(waiting) == {"openapi"}
    dashboard.release()
    assert paths.openapi(openapi.holder).acquire() == "acquired"
    judged = paths.judged()
    assert {turn for _, _, turn in judged} >= {"no_slot", "kept_for_other", "served"}
    assert "fair_turn" in {reason for _, reason, _ in judged}
    # Consecutive writes went to alternate replicas: both judged through the record.
    assert {index for index, _, _ in judged} == {0, 1}


def test_a_waiter_that_vanishes_holds_the_turn_for_a_bounded_time(paths: Paths) -> None:
    paths.capacity_poll()  # a dashboard task that then gives up: it never polls again
    paths.free_a_slot()
    openapi = paths.openapi()
    assert openapi.acquire() == "busy"
    # The turn kept for the dashboard lapses after HOLD_SECONDS; the next OpenAPI poll
    # after that takes it (polled here every second, as fast as the dispatcher could).
    wait_until(lambda: openapi.acquire() == "acquired", 120, "the kept turn to lapse", interval=1.0)
    assert paths.holder() == openapi.holder
    assert "served_after_lapse" in {turn for _, _, turn in paths.judged()}
    waiting = paths.turns()
    assert waiting["paths"] == {} and waiting["held"] is None


def test_a_takeover_of_a_live_lease_is_still_refused_for_the_path_whose_turn_it_is(
    paths: Paths,
) -> None:
    paths.capacity_poll()  # the dashboard is first in line
    # A submitter of no configured path (outside the rule) takes the free Lease and
    # keeps it: a live Lease. Then a slot frees: the next turn is the dashboard's.
    bob = DashboardLeaseClient.on(paths.cp, "bob", paths.ns, holder=new_holder("bob"))
    paths.next_replica()
    assert bob.acquire() == "acquired"
    paths.free_a_slot()
    # The dashboard comes back with a clock 2000 s ahead: it judges the live Lease
    # expired and writes a takeover. The guard refuses it; the rule is never asked.
    paths.next_replica()
    skewed = DashboardLeaseClient.on(paths.cp, DASHBOARD, paths.ns, clock_offset=2000.0)
    assert skewed.acquire() == "busy"
    assert skewed.last_status == 409
    message = str(skewed.last_answer.get("message") or "")
    assert "cannot take it over before then" in message, message
    assert paths.holder() == bob.holder
    assert "takeover_live" in guard_reasons(paths, DASHBOARD)
    assert "dashboard" in paths.turns()["paths"]  # type: ignore[operator]


def guard_reasons(paths: Paths, user: str) -> list[str]:
    """The Lease guard's reasons for ``user``'s writes in the namespace."""
    out = []
    for replica in paths.rig.hooks:
        for line in replica.log().splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if (
                    record.get("namespace") == paths.ns
                    and record.get("webhook") == "lease-guard.elb-gate.io"
                    and record.get("user") == user
                ):
                    out.append(str(record.get("reason")))
    return out
