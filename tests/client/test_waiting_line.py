"""The waiting line of ``elb-gate submit`` users and whose turn it is: pure tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from client import waiting_line as wl
from elbgate.lease import Expiry, format_microtime

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def entry(
    holder: str,
    created_ago: float,
    *,
    renewed_ago: float = 1.0,
    arrived: str = "",
    ttl: int = wl.ENTRY_TTL_SECONDS,
) -> wl.Entry:
    body = wl.entry_body("blast", holder, NOW - timedelta(seconds=renewed_ago))
    body["metadata"]["creationTimestamp"] = (NOW - timedelta(seconds=created_ago)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    body["metadata"]["resourceVersion"] = "7"
    body["spec"]["leaseDurationSeconds"] = ttl
    if arrived:
        body["spec"]["acquireTime"] = arrived
    return wl.Entry.from_lease(body)


def test_an_entry_is_a_labelled_lease_named_after_its_holder() -> None:
    body = wl.entry_body("blast", "cli-0123abcd", NOW)
    assert body["metadata"]["name"] == "elb-blast-wait-cli-0123abcd"
    assert body["metadata"]["labels"] == {"elb-gate.io/waiting-for": "submit"}
    assert body["spec"]["holderIdentity"] == "cli-0123abcd"
    assert body["spec"]["renewTime"] == body["spec"]["acquireTime"] == format_microtime(NOW)


def test_the_line_is_first_come_first_served_on_the_api_servers_clock() -> None:
    entries = [entry("cli-c", 3), entry("cli-a", 30), entry("cli-b", 10)]
    assert [e.holder for e in wl.line(entries, NOW, 30)] == ["cli-a", "cli-b", "cli-c"]
    assert wl.position("cli-a", entries, NOW, 30) == 0
    assert wl.position("cli-c", entries, NOW, 30) == 2
    assert wl.position("cli-z", entries, NOW, 30) is None


def test_arrivals_in_the_same_second_are_ordered_by_their_acquire_time_then_name() -> None:
    same = [
        entry("cli-late", 5, arrived="2026-11-29T11:59:55.900000Z"),
        entry("cli-early", 5, arrived="2026-11-29T11:59:55.100000Z"),
        entry("cli-b", 5, arrived="2026-11-29T11:59:55.500000Z"),
        entry("cli-a", 5, arrived="2026-11-29T11:59:55.500000Z"),
    ]
    assert [e.holder for e in wl.line(same, NOW, 30)] == ["cli-early", "cli-a", "cli-b", "cli-late"]


@pytest.mark.parametrize(
    ("renewed_ago", "skew", "stale"),
    [
        pytest.param(1.0, 30, False, id="renewed a second ago"),
        pytest.param(59.0, 30, False, id="within TTL plus skew"),
        pytest.param(61.0, 30, True, id="past TTL plus skew: its waiter is gone"),
        pytest.param(31.0, 0, True, id="past TTL without skew"),
    ],
)
def test_an_entry_not_renewed_within_its_ttl_is_stale(
    renewed_ago: float, skew: float, stale: bool
) -> None:
    e = entry("cli-x", 100, renewed_ago=renewed_ago)
    assert e.stale(NOW, skew) is stale
    assert (e in wl.stale_entries([e], NOW, skew)) is stale
    assert (wl.position("cli-x", [e], NOW, skew) is None) is stale


def test_a_stale_entry_ahead_does_not_hold_the_line_back() -> None:
    entries = [entry("cli-dead", 300, renewed_ago=200), entry("cli-me", 10)]
    assert wl.position("cli-me", entries, NOW, 30) == 0


def test_an_entry_without_a_renew_time_is_stale_and_other_leases_are_not_entries() -> None:
    broken = entry("cli-x", 10)
    broken = wl.Entry(broken.name, broken.holder, broken.created, "", None, 30, "1")
    other = wl.Entry("elb-blast-submit-blast", "cli-y", NOW, "", NOW, 900, "1")
    assert broken.stale(NOW, 30)
    assert wl.line([broken, other], NOW, 30) == []


def test_renewing_an_entry_moves_only_its_renew_time() -> None:
    body = wl.entry_body("blast", "cli-a", NOW - timedelta(seconds=20))
    body["metadata"]["resourceVersion"] = "12"
    renewed = wl.renewed_body(body, NOW)
    assert renewed["spec"]["renewTime"] == format_microtime(NOW)
    assert renewed["spec"]["acquireTime"] == body["spec"]["acquireTime"]
    assert renewed["metadata"]["resourceVersion"] == "12"
    assert body["spec"]["renewTime"] != renewed["spec"]["renewTime"]  # the input is untouched


@pytest.mark.parametrize(
    ("ahead", "open_since", "now", "try_now", "look_again_at"),
    [
        pytest.param(0, 100.0, 100.0, True, 100.0, id="head: tries the moment the slot frees"),
        pytest.param(1, 100.0, 100.5, False, 101.0, id="second: gives the head one step"),
        pytest.param(1, 100.0, 101.0, True, 101.0, id="second: head did not take it in time"),
        pytest.param(3, 100.0, 102.0, False, 103.0, id="fourth: three steps"),
        pytest.param(2, None, 100.0, False, 130.0, id="nothing free: wait for a change"),
        pytest.param(2, None, 130.0, True, 130.0, id="nothing free: fallback poll"),
        pytest.param(5, 100.0, 101.0, False, 105.0, id="far back: next look at its step"),
    ],
)
def test_whose_turn_it_is(
    ahead: int | None, open_since: float | None, now: float, try_now: bool, look_again_at: float
) -> None:
    got = wl.turn(ahead=ahead, open_since=open_since, fallback_at=130.0, now=now, step=1.0)
    assert (got.try_now, got.look_again_at) == (try_now, look_again_at)


def test_a_waiter_without_a_place_in_line_is_staggered_by_its_spread() -> None:
    early = wl.turn(ahead=None, open_since=100.0, fallback_at=130.0, now=100.2, spread=0.3)
    late = wl.turn(ahead=None, open_since=100.0, fallback_at=130.0, now=100.3, spread=0.3)
    assert not early.try_now and early.look_again_at == pytest.approx(100.3)
    assert late.try_now


def test_the_fallback_comes_before_a_turn_that_is_further_away() -> None:
    got = wl.turn(ahead=50, open_since=100.0, fallback_at=110.0, now=101.0, step=1.0)
    assert got == wl.Turn(False, 110.0, "my turn comes after the waiters ahead")


def lease(holder: str, renewed_ago: float, duration: int = 900) -> dict[str, Any]:
    stamp = format_microtime(NOW - timedelta(seconds=renewed_ago))
    return {
        "metadata": {"name": "elb-blast-submit-blast"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": stamp},
    }


def job(app: str, job_id: str, age: float = 10.0, *, done: bool = False) -> dict[str, Any]:
    created = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {
            "name": f"{app}-{job_id}",
            "labels": {"app": app, "elb-job-id": job_id},
            "creationTimestamp": created,
        },
        "status": {"succeeded": 1} if done else {"active": 1},
    }


@pytest.mark.parametrize(
    ("the_lease", "jobs", "is_open"),
    [
        pytest.param(None, [], True, id="no Lease, no searches"),
        pytest.param(lease("", 5), [job("blast", "a")], True, id="Lease free, room"),
        pytest.param(lease("cli-x", 5), [], False, id="Lease held"),
        pytest.param(lease("cli-x", 1000), [], True, id="Lease expired (900 s + 30 s skew)"),
        pytest.param(
            lease("", 5),
            [job("blast", "a"), job("submit", "b"), job("finalizer", "c")],
            False,
            id="three active searches: full",
        ),
        pytest.param(
            lease("", 5),
            [job("blast", "a"), job("submit", "b"), job("finalizer", "c", age=400)],
            True,
            id="a lone finalizer past its grace holds no slot",
        ),
        pytest.param(
            lease("", 5),
            [job("blast", "a"), job("submit", "b"), job("blast", "c", done=True)],
            True,
            id="a finished search frees its slot",
        ),
    ],
)
def test_the_watched_gates_say_whether_a_try_could_succeed(
    the_lease: dict[str, Any] | None, jobs: list[dict[str, Any]], is_open: bool
) -> None:
    view = wl.slot_view(the_lease, jobs, NOW, ceiling=3, expiry=Expiry(30, 900), grace_seconds=300)
    assert view.open is is_open
