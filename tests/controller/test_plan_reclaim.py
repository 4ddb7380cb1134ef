"""Plan tables: stale-Lease reclaim and dead-holder reclaim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from controller.actions import ReleaseLease
from controller.plan import make_plan
from controller.reclaim import PodSeen, holder_pod_to_check, plan_reclaim
from tests.controller.builders import NOW, POD_UID, STAMP, lease, settings, snapshot

# Defaults: TTL 900 s, skew 30 s → expiry 930 s after renewTime; reclaim grace 45 s.


@dataclass(frozen=True)
class Case:
    name: str
    lease: dict[str, Any] | None
    pod: PodSeen | None = None
    reason: str | None = None
    """Expected ReleaseLease reason, or None for "leave it alone"."""


CASES = [
    Case("no lease at all", None),
    Case("a free lease", {"holder": ""}),
    Case("held and renewed recently is not expired yet", {"renewed_ago": 100}),
    Case("one second before expiry is not expired yet", {"renewed_ago": 929}),
    Case("expiry is renewTime plus duration plus skew", {"renewed_ago": 930}, reason="expired"),
    Case("held long past expiry", {"renewed_ago": 5000}, reason="expired"),
    Case("a short lease expires sooner", {"renewed_ago": 50, "duration": 15}, reason="expired"),
    Case("held but never renewed counts as expired", {"renewed_ago": None}, reason="expired"),
    Case(
        "an unparseable renewTime is never stolen",
        {"renew_time": "yesterday-ish", "pod": STAMP},
        PodSeen("absent"),
    ),
    Case(
        "expired and dead holder: reported as expired",
        {"renewed_ago": 5000, "pod": STAMP},
        PodSeen("absent"),
        reason="expired",
    ),
    Case(
        "pod gone (404) and unrenewed past the grace",
        {"renewed_ago": 60, "pod": STAMP},
        PodSeen("absent"),
        reason="dead_holder",
    ),
    Case(
        "pod recreated with a new uid",
        {"renewed_ago": 60, "pod": STAMP},
        PodSeen("present", uid="99999999-new-uid"),
        reason="dead_holder",
    ),
    Case(
        "pod exists with the same uid",
        {"renewed_ago": 600, "pod": STAMP},
        PodSeen("present", uid=POD_UID),
    ),
    Case(
        "a pod GET error is not gone",
        {"renewed_ago": 600, "pod": STAMP},
        PodSeen("unknown", detail="500 InternalError"),
    ),
    Case(
        "pod gone but renewed exactly at the grace boundary",
        {"renewed_ago": 45, "pod": STAMP},
        PodSeen("absent"),
    ),
    Case(
        "pod gone and renewed one second past the grace",
        {"renewed_ago": 46, "pod": STAMP},
        PodSeen("absent"),
        reason="dead_holder",
    ),
    Case("pod gone but no holder-pod stamp", {"renewed_ago": 600}, PodSeen("absent")),
    Case(
        "a malformed holder-pod stamp is ignored",
        {"renewed_ago": 600, "pod": "just-a-pod-name"},
        PodSeen("absent"),
    ),
    Case("stamped pod but no lookup made", {"renewed_ago": 600, "pod": STAMP}, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reclaim_table(case: Case) -> None:
    view = lease(**case.lease) if case.lease is not None else None
    got = plan_reclaim(view, case.pod, NOW, settings())
    if case.reason is None:
        assert got is None
    else:
        assert got is not None
        assert got.reason == case.reason
        assert view is not None
        assert (got.holder, got.resource_version, got.name) == (
            view.holder,
            view.resource_version,
            view.name,
        )


def test_dead_holder_message_names_the_pod_and_the_grace() -> None:
    got = plan_reclaim(
        lease(renewed_ago=60, pod=STAMP), PodSeen("present", uid="other"), NOW, settings()
    )
    assert got is not None
    assert "blast/celery-worker-0" in got.message
    assert "recreated" in got.message
    assert "45s grace" in got.message


def test_expired_message_names_the_holder_and_the_expiry() -> None:
    got = plan_reclaim(lease(renewed_ago=5000), None, NOW, settings())
    assert got is not None
    assert got.holder in got.message and "expired at" in got.message


@pytest.mark.parametrize(
    ("lease_kw", "grace", "expected"),
    [
        ({"renewed_ago": 60, "pod": STAMP}, 45, ("blast", "celery-worker-0", POD_UID)),
        ({"renewed_ago": 30, "pod": STAMP}, 45, None),
        ({"renewed_ago": 30, "pod": STAMP}, 10, ("blast", "celery-worker-0", POD_UID)),
        ({"renewed_ago": 5000, "pod": STAMP}, 45, None),  # expired: no lookup needed
        ({"renewed_ago": 60}, 45, None),  # no stamp
        ({"holder": "", "pod": STAMP}, 45, None),  # free
    ],
)
def test_a_pod_lookup_is_made_only_when_it_could_change_the_outcome(
    lease_kw: dict[str, Any], grace: int, expected: tuple[str, str, str] | None
) -> None:
    got = holder_pod_to_check(lease(**lease_kw), NOW, settings(reclaim_grace_seconds=grace))
    assert got == expected


def test_the_combined_plan_uses_the_pod_lookup_keyed_by_the_stamp() -> None:
    snap = snapshot(lease=lease(renewed_ago=60, pod=STAMP))
    found = make_plan(snap, {STAMP: PodSeen("absent")}, None, NOW, settings())
    releases = [a for a in found.actions if isinstance(a, ReleaseLease)]
    assert [r.reason for r in releases] == ["dead_holder"]
    # A lookup made for another stamp (the Lease changed meanwhile) does not apply.
    other = make_plan(snap, {"blast/other/uid": PodSeen("absent")}, None, NOW, settings())
    assert not [a for a in other.actions if isinstance(a, ReleaseLease)]


def test_the_lease_expired_gauge_follows_the_controller_clock() -> None:
    assert make_plan(
        snapshot(lease=lease(renewed_ago=5000)), {}, None, NOW, settings()
    ).lease_expired
    assert not make_plan(
        snapshot(lease=lease(renewed_ago=5)), {}, None, NOW, settings()
    ).lease_expired
