"""Plan tables: stale-Lease reclaim and dead-holder reclaim (the holder-gone rule itself is
tabled in test_holder_gone.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from controller.actions import ReleaseLease
from controller.holders import PodSeen, PodView
from controller.plan import make_plan
from controller.reclaim import holder_pod_to_check, plan_reclaim
from elbgate.settings import GateSettings
from tests.builders import (
    NOW,
    POD_UID,
    STAMP,
    ago,
    lease_view,
    pod_doc,
    running,
    sections,
    snapshot,
)

# Defaults: TTL 900 s, skew 30 s → expiry 930 s after renewTime; no reclaim grace.


@dataclass(frozen=True)
class Case:
    name: str
    lease: dict[str, Any] | None
    pod: PodSeen | None = None
    reason: str | None = None
    """Expected ReleaseLease reason, or None for "leave it alone"."""
    overrides: dict[str, Any] | None = None


ALIVE = PodSeen.of(PodView.from_dict(pod_doc()))
RESTARTED = PodSeen.of(
    PodView.from_dict(
        pod_doc(
            [
                running(
                    since=NOW - timedelta(seconds=2),
                    restarts=1,
                    last_ended=NOW - timedelta(seconds=3),
                )
            ]
        )
    )
)

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
        "pod gone one second after a renewal: reclaimed at once",
        {"renewed_ago": 1, "pod": STAMP},
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
        "its container restarted after the renewal",
        {"renewed_ago": 10, "pod": STAMP},
        RESTARTED,
        reason="dead_holder",
    ),
    Case("pod alive with the same uid", {"renewed_ago": 600, "pod": STAMP}, ALIVE),
    Case(
        "a pod that cannot be seen is not gone",
        {"renewed_ago": 600, "pod": STAMP},
        PodSeen("unknown", detail="500 InternalError"),
    ),
    Case(
        "an optional reclaim grace holds a reclaim back",
        {"renewed_ago": 44, "pod": STAMP},
        PodSeen("absent"),
        overrides={"reclaim_grace_seconds": 45},
    ),
    Case(
        "an optional reclaim grace, once passed, lets it through",
        {"renewed_ago": 45, "pod": STAMP},
        PodSeen("absent"),
        reason="dead_holder",
        overrides={"reclaim_grace_seconds": 45},
    ),
    Case("pod gone but no holder-pod stamp", {"renewed_ago": 600}, PodSeen("absent")),
    Case(
        "a malformed holder-pod stamp is ignored",
        {"renewed_ago": 600, "pod": "just-a-pod-name"},
        PodSeen("absent"),
    ),
    Case("stamped pod but nothing known of it", {"renewed_ago": 600, "pod": STAMP}, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reclaim_table(case: Case) -> None:
    view = lease_view(**case.lease) if case.lease is not None else None
    got = plan_reclaim(view, case.pod, NOW, *sections(**(case.overrides or {}))).release
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


def test_dead_holder_message_names_the_pod_and_the_evidence() -> None:
    got = plan_reclaim(
        lease_view(renewed_ago=60, pod=STAMP), PodSeen("present", uid="other"), NOW, *sections()
    ).release
    assert got is not None
    assert "blast/celery-worker-0" in got.message and "recreated" in got.message
    assert "(pod_replaced)" in got.message and "last renewed 1m0s ago" in got.message
    assert got.evidence == "pod_replaced"


def test_a_reclaim_carries_when_its_evidence_began() -> None:
    got = plan_reclaim(lease_view(renewed_ago=10, pod=STAMP), RESTARTED, NOW, *sections()).release
    assert got is not None and got.evidence == "container_restarted"
    assert got.evidence_since == NOW - timedelta(seconds=3)
    expired = plan_reclaim(lease_view(renewed_ago=1000), None, NOW, *sections()).release
    assert expired is not None and expired.evidence_since == ago(1000 - 930)


def test_expired_message_names_the_holder_and_the_expiry() -> None:
    got = plan_reclaim(lease_view(renewed_ago=5000), None, NOW, *sections()).release
    assert got is not None
    assert got.holder in got.message and "expired at" in got.message
    skewed = plan_reclaim(lease_view(renewed_ago=5000), None, NOW, *sections(clock_skew_seconds=90))
    assert skewed.release is not None
    assert "(renewTime + leaseDurationSeconds + 1m30s skew" in skewed.release.message


def test_a_live_holder_is_looked_at_again_at_its_expiry() -> None:
    got = plan_reclaim(lease_view(renewed_ago=100, pod=STAMP), ALIVE, NOW, *sections())
    assert got.release is None and got.look_again_at == ago(100 - 930)


def test_a_held_back_reclaim_is_looked_at_again_when_the_grace_ends() -> None:
    got = plan_reclaim(
        lease_view(renewed_ago=5, pod=STAMP),
        PodSeen("absent"),
        NOW,
        *sections(reclaim_grace_seconds=45),
    )
    assert got.release is None and got.look_again_at == ago(5 - 45)


@pytest.mark.parametrize(
    ("lease_kw", "expected"),
    [
        ({"renewed_ago": 1, "pod": STAMP}, ("blast", "celery-worker-0", POD_UID)),
        ({"renewed_ago": 600, "pod": STAMP}, ("blast", "celery-worker-0", POD_UID)),
        ({"renewed_ago": 5000, "pod": STAMP}, None),  # expired: reclaimed as such
        ({"renewed_ago": 60}, None),  # no stamp
        ({"holder": "", "pod": STAMP}, None),  # free
        ({"renew_time": "garbage", "pod": STAMP}, None),  # never judged
    ],
)
def test_the_watched_pod_is_the_one_a_live_stamp_names(
    lease_kw: dict[str, Any], expected: tuple[str, str, str] | None
) -> None:
    assert holder_pod_to_check(lease_view(**lease_kw), NOW, GateSettings()) == expected


def test_the_combined_plan_uses_the_pod_lookup_keyed_by_the_stamp() -> None:
    snap = snapshot(lease=lease_view(renewed_ago=60, pod=STAMP))
    found = make_plan(snap, {STAMP: PodSeen("absent")}, None, NOW, *sections())
    releases = [a for a in found.actions if isinstance(a, ReleaseLease)]
    assert [r.reason for r in releases] == ["dead_holder"]
    # A lookup made for another stamp (the Lease changed meanwhile) does not apply.
    other = make_plan(snap, {"blast/other/uid": PodSeen("absent")}, None, NOW, *sections())
    assert not [a for a in other.actions if isinstance(a, ReleaseLease)]


def test_the_lease_expired_gauge_follows_the_controller_clock() -> None:
    assert make_plan(
        snapshot(lease=lease_view(renewed_ago=5000)), {}, None, NOW, *sections()
    ).lease_expired
    assert not make_plan(
        snapshot(lease=lease_view(renewed_ago=5)), {}, None, NOW, *sections()
    ).lease_expired
