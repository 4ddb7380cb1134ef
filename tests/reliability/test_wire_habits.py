"""Whether each way the two real clients depart from the protocol changes any outcome.

One scripted run of the Lease protocol against the real webhook on the real control
plane, played by the idealised client (:mod:`testbed.ideal_client`), by the idealised
client with each real client's habit switched on alone, and by the two real clients'
reproductions (:mod:`testbed.clients`). What is compared is what anyone could observe:
each call's outcome as the client sees it, whether a write was sent, Gate A's answer to
each Job, and the stored Lease's decision-relevant state after each step (who holds it,
whether elb-gate's stamp names the holder's user, whether ``renewTime`` is fresh and
``acquireTime`` still the acquisition's, and ``leaseDurationSeconds``, which with
``renewTime`` decides the expiry).

Found, two habits change an outcome:

* the 30 s skew margin (both clients) changes when, not whether: a client with it does
  not take over an expired Lease the moment the webhook would allow it, but its margin
  later;
* keeping the duration the Lease had (the dashboard) makes its hold last as long as the
  previous holder's did: taking over from an in-cluster holder (120 s in the
  reliability runs), a dashboard that dies blocks the namespace for 120 s, not for its
  own TTL.

The fresh bodies (stamps dropped: the webhook carries them over), the ``acquireTime``
reset (the webhook keeps the stamped one), the fresh release body and the kubectl
transport change nothing observable.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from testbed import elastic_blast as elb
from testbed.api import ApiError, JsonObj
from testbed.clients import SKEW_SECONDS, DashboardLeaseClient, OpenApiLeaseClient, parse_time
from testbed.controlplane import ControlPlane
from testbed.ideal_client import DASHBOARD_HABITS, OPENAPI_HABITS, Habits, IdealLeaseClient
from testbed.webhook_process import WebhookProcess
from tests.webhook.conftest import SHORT_LEASE_ENV, wait_expired

pytestmark = pytest.mark.kubectl

TTL = 2
"""x's leaseDurationSeconds: short, so a hold expires within the test."""
Y_TTL = 3
"""y's: another, so a client that keeps the duration it found shows it."""
Client = IdealLeaseClient | DashboardLeaseClient | OpenApiLeaseClient
Maker = Callable[..., Client]
"""``(cp, user, namespace, **kwargs) -> client``."""
TAKEOVER_AT_EXPIRY = "x tries the moment the webhook would let it take over"

HABITS = {
    "fresh_body": Habits(fresh_body=True),
    "reset_acquire": Habits(reset_acquire=True),
    "skew": Habits(skew=True),
    "fresh_release": Habits(fresh_release=True),
    "keeps_duration": Habits(keeps_duration=True),
}
KEPT_Y_DURATION = {
    TAKEOVER_AT_EXPIRY,
    "x takes over, past its margin",
    "y, woken, releases",
    "x releases again",
}
"""The steps after x takes y's expired hold over, where the stored duration is y's."""
EXPECTED: dict[str, set[str]] = {
    "fresh_body": set(),
    "reset_acquire": set(),
    "skew": {TAKEOVER_AT_EXPIRY},
    "fresh_release": set(),
    "keeps_duration": KEPT_Y_DURATION,
}
"""The steps whose outcome each habit alone changes."""


@pytest.fixture(scope="module")
def webhook_env() -> dict[str, str]:
    """Short Lease bounds and no skew: a 2 s Lease expires 2 s after its renewal."""
    return SHORT_LEASE_ENV


def ideal(habits: Habits) -> Maker:
    def make(cp: ControlPlane, user: str, ns: str, **kwargs: Any) -> Client:
        return IdealLeaseClient.on(cp, user, ns, habits=habits, ttl=TTL, **kwargs)

    return make


def real_dashboard(cp: ControlPlane, user: str, ns: str, **kwargs: Any) -> Client:
    return DashboardLeaseClient.on(cp, user, ns, ttl=TTL, **kwargs)


def real_openapi(cp: ControlPlane, user: str, ns: str, **kwargs: Any) -> Client:
    return OpenApiLeaseClient.on(cp, user, ns, ttl=TTL, **kwargs)


class Run:
    """One play of the script by client ``x`` (``y`` is always the ideal client)."""

    def __init__(self, cp: ControlPlane, hook: WebhookProcess, make: Maker) -> None:
        self.cp = cp
        self.ns = hook.install.gate(cp.new_namespace("habits"))
        self.users = {"x": cp.plain_user(), "y": cp.plain_user()}
        self.make = make
        self.x = make(cp, self.users["x"], self.ns)
        self.y = IdealLeaseClient.on(cp, self.users["y"], self.ns, ttl=Y_TTL)
        self.trace: dict[str, Any] = {}
        self.acquired_at = ""

    def lease(self) -> JsonObj:
        return self.cp.admin.get("leases", self.ns, f"elb-blast-submit-{self.ns}")

    def view(self) -> tuple[str, bool, bool, bool, int]:
        """(holder: x/y/free, stamp names the holder's user, renewTime fresh,
        acquireTime the acquisition's, leaseDurationSeconds)."""
        lease = self.lease()
        spec, notes = lease["spec"], lease["metadata"].get("annotations") or {}
        who = {self.x.holder: "x", self.y.holder: "y"}.get(spec.get("holderIdentity") or "", "")
        stamped = notes.get("elb-gate.io/holder-user") == self.users.get(who)
        renewed = parse_time(spec.get("renewTime"))
        fresh = renewed is not None and abs(datetime.now(UTC) - renewed) < timedelta(seconds=20)
        if who and spec.get("acquireTime") != self.acquired_at:
            self.acquired_at = spec.get("acquireTime") or ""
            kept = False
        else:
            kept = bool(who)
        duration = int(spec.get("leaseDurationSeconds") or 0)
        return who or "free", stamped, fresh, kept, duration

    def call(self, step: str, who: str, op: str) -> None:
        client = self.x if who == "x" else self.y
        before = len(client.sent)
        outcome = getattr(client, op)()
        self.trace[step] = (outcome, len(client.sent) > before, self.view())

    def job(self, step: str, who: str, body: JsonObj) -> None:
        try:
            self.cp.api(self.users[who]).create(body)
            self.trace[step] = 201
        except ApiError as exc:
            self.trace[step] = exc.status

    def play(self) -> dict[str, Any]:
        ns, s1, s2 = self.ns, elb.search_id(), elb.search_id()
        self.call("x acquires the absent Lease", "x", "acquire")
        self.call("y finds it busy", "y", "acquire")
        self.job("x opens search 1", "x", elb.ready(elb.blast_batch(s1, 0), ns))
        self.call("x renews", "x", "acquire")
        self.call("y still finds it busy", "y", "acquire")
        self.job("x adds search 1's finalizer", "x", elb.ready(elb.finalizer(s1), ns))
        self.job("y opens a search without the Lease", "y", elb.ready(elb.blast_batch(s2, 0), ns))
        self.call("x releases", "x", "release")
        self.call("y acquires the free Lease", "y", "acquire")
        self.call("x finds it busy", "x", "acquire")
        wait_expired(self.cp, ns)  # y stops renewing: its hold expires on the webhook's clock
        self.call(TAKEOVER_AT_EXPIRY, "x", "acquire")
        if self.trace[TAKEOVER_AT_EXPIRY][0] != "acquired":
            # The same client once its own clock is past its margin: it takes over.
            later = self.make(self.cp, self.users["x"], ns, holder=self.x.holder,
                              clock_offset=SKEW_SECONDS + 1)  # fmt: skip
            self.x, before = later, len(later.sent)
            self.trace["x takes over, past its margin"] = (
                later.acquire(), len(later.sent) > before, self.view()
            )  # fmt: skip
        else:
            self.trace["x takes over, past its margin"] = self.trace[TAKEOVER_AT_EXPIRY]
        self.job("y, woken, adds a Job to its search", "y", elb.ready(elb.finalizer(s2), ns))
        self.call("y, woken, releases", "y", "release")
        self.job("x opens search 2", "x", elb.ready(elb.blast_batch(elb.search_id(), 0), ns))
        self.call("x releases again", "x", "release")
        return self.trace


def differences(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    assert a.keys() == b.keys()
    return {step for step in a if a[step] != b[step]}


@pytest.fixture(scope="module")
def ideal_trace(control_plane: ControlPlane, hook: WebhookProcess) -> dict[str, Any]:
    return Run(control_plane, hook, ideal(Habits())).play()


def test_the_ideal_client_plays_the_protocol_as_designed(ideal_trace: dict[str, Any]) -> None:
    held_by = {step: o[2][0] for step, o in ideal_trace.items() if isinstance(o, tuple)}
    acquired = ("acquired", True, ("x", True, True, False, TTL))
    assert ideal_trace["x acquires the absent Lease"] == acquired
    assert ideal_trace["x renews"] == ("renewed", True, ("x", True, True, True, TTL))
    assert ideal_trace["y finds it busy"][:2] == ("busy", False)
    y_acquired = ("acquired", True, ("y", True, True, False, Y_TTL))
    assert ideal_trace["y acquires the free Lease"] == y_acquired
    assert ideal_trace[TAKEOVER_AT_EXPIRY] == acquired
    assert held_by["y, woken, releases"] == "x"
    assert [ideal_trace[s] for s in ("x opens search 1", "x adds search 1's finalizer")] == [
        201
    ] * 2
    assert ideal_trace["y opens a search without the Lease"] == 403
    assert ideal_trace["y, woken, adds a Job to its search"] == 403
    assert ideal_trace["x opens search 2"] == 201


@pytest.mark.parametrize("habit", sorted(HABITS))
def test_each_habit_alone_changes_only_what_it_is_expected_to(
    control_plane: ControlPlane, hook: WebhookProcess, ideal_trace: dict[str, Any], habit: str
) -> None:
    trace = Run(control_plane, hook, ideal(HABITS[habit])).play()
    assert differences(trace, ideal_trace) == EXPECTED[habit], (trace, ideal_trace)
    if habit == "skew":  # later, not never: past its margin it takes over all the same
        assert trace["x takes over, past its margin"] == ideal_trace[TAKEOVER_AT_EXPIRY]
        assert trace[TAKEOVER_AT_EXPIRY] == ("busy", False, ("y", True, True, True, Y_TTL))
    if habit == "keeps_duration":  # it holds for y's duration, not its own
        y_duration = ("x", True, True, False, Y_TTL)
        assert trace[TAKEOVER_AT_EXPIRY] == ("acquired", True, y_duration)


@pytest.mark.parametrize(
    ("make", "habits"),
    [(real_dashboard, DASHBOARD_HABITS), (real_openapi, OPENAPI_HABITS)],
    ids=["dashboard", "openapi"],
)
def test_the_real_clients_differ_from_the_ideal_only_by_their_habits(
    control_plane: ControlPlane,
    hook: WebhookProcess,
    ideal_trace: dict[str, Any],
    make: Maker,
    habits: Habits,
) -> None:
    """All of a real client's habits at once (and, for the OpenAPI service, kubectl as
    its transport and stderr as its busy signal) change no more than each did alone."""
    trace = Run(control_plane, hook, make).play()
    on = [h for h in HABITS if getattr(habits, h)]
    assert differences(trace, ideal_trace) == set().union(*(EXPECTED[h] for h in on))
