"""Lease rules: MicroTime, expiry on one clock, holder identities."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from elbgate.lease import (
    UNPARSEABLE,
    Expiry,
    LeaseView,
    format_microtime,
    holder_source,
    new_holder_identity,
    new_lease,
    parse_holder_pod,
    parse_microtime,
)
from elbgate.names import is_submit_lease_name, lease_name
from tests.builders import NOW, lease

T = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-11-29T12:00:00Z", T),
        ("2026-11-29T12:00:00.000000Z", T),
        ("2026-11-29T12:00:00.5Z", T + timedelta(microseconds=500_000)),
        ("2026-11-29T12:00:00.123456789Z", T + timedelta(microseconds=123_456)),
        ("2026-11-29T13:00:00+01:00", T),
        ("2026-11-29T07:00:00.000000-05:00", T),
        ("2026-11-29t12:00:00z", T),
        (None, None),
        ("", None),
        ("yesterday", UNPARSEABLE),
        ("2026-11-29 12:00:00", UNPARSEABLE),
        ("2026-13-29T12:00:00Z", UNPARSEABLE),
        ("2026-11-29T12:00:00", UNPARSEABLE),  # no zone: ambiguous, not guessed
        (1732881600, UNPARSEABLE),
    ],
)
def test_microtime_parsing(raw: object, expected: object) -> None:
    assert parse_microtime(raw) == expected


def test_microtime_round_trips_in_the_apiserver_format() -> None:
    moment = T + timedelta(microseconds=42)
    text = format_microtime(moment)
    assert text == "2026-11-29T12:00:00.000042Z"
    assert parse_microtime(text) == moment


SKEW = 30


@pytest.mark.parametrize(
    ("obj", "expired"),
    [
        (lease(holder=""), True),
        (lease(holder="dash-1", renewed_ago=5), False),
        (lease(holder="dash-1", renewed_ago=900), False),  # inside the skew margin
        (lease(holder="dash-1", renewed_ago=929), False),
        (lease(holder="dash-1", renewed_ago=930), True),
        (lease(holder="dash-1", renewed_ago=40, duration=10), True),
        (lease(holder="dash-1", renewed_ago=None), True),  # never renewed: free
        (lease(holder="dash-1", renew_raw="garbage"), False),  # never steal on bad data
        (lease(holder="dash-1", renewed_ago=-600), False),  # renewed "in the future"
        (lease(holder="dash-1", renewed_ago=100, duration=None), False),  # default TTL applies
        (lease(holder="dash-1", renewed_ago=1000, duration=None), True),
    ],
)
def test_expiry_is_judged_on_one_clock_with_skew(obj: dict, expired: bool) -> None:
    view = LeaseView.from_dict(obj)
    assert Expiry(SKEW, default_duration_seconds=900).passed(view, NOW) is expired


def test_expiry_moment_includes_duration_and_skew() -> None:
    view = LeaseView.from_dict(lease(holder="h", renewed_ago=0, duration=60))
    assert Expiry(SKEW, 900).at(view) == NOW + timedelta(seconds=90)
    assert Expiry(SKEW, 900).at(LeaseView.from_dict(lease())) is None


def test_lease_view_reads_the_stamps() -> None:
    view = LeaseView.from_dict(
        lease(
            holder="openapi-abc",
            annotations={
                "elb-gate.io/holder-user": "alice",
                "elb-gate.io/holder-pod": "blast/openapi-0/1234",
            },
        )
    )
    assert (view.holder_user, view.holder_pod, view.held) == ("alice", "blast/openapi-0/1234", True)
    assert view.resource_version == "7"


def test_lease_view_survives_a_bare_object() -> None:
    view = LeaseView.from_dict({})
    assert (view.holder, view.held, view.duration_seconds, view.renew_time) == (
        "",
        False,
        None,
        None,
    )


def test_holder_identity_carries_the_full_uuid() -> None:
    ident = new_holder_identity("dashboard")
    assert re.fullmatch(r"dashboard-[0-9a-f]{32}", ident)
    assert holder_source(ident) == "dashboard"
    assert new_holder_identity("dashboard") != ident


@pytest.mark.parametrize("bad", ["", "Dash", "dash_board", "-x", "x-"])
def test_holder_source_must_be_a_dns_word(bad: str) -> None:
    with pytest.raises(ValueError):
        new_holder_identity(bad)


@pytest.mark.parametrize(
    ("holder", "source"),
    [
        ("openapi-1b4e28ba-2fa1-11d2-883f-0016d3cca427", "openapi"),
        ("my-path-0123456789abcdef0123456789abcdef", "my-path"),
        ("dashboard-1234", None),  # a truncated uuid is not an identity
        ("nobody", None),
    ],
)
def test_holder_source_parsing(holder: str, source: str | None) -> None:
    assert holder_source(holder) == source


@pytest.mark.parametrize(
    ("stamp", "parsed"),
    [
        ("blast/openapi-0/uid-1", ("blast", "openapi-0", "uid-1")),
        ("blast/openapi-0", None),
        ("blast//uid", None),
        ("", None),
        ("a/b/c/d", None),
    ],
)
def test_holder_pod_stamp_parsing(stamp: str, parsed: tuple | None) -> None:
    assert parse_holder_pod(stamp) == parsed


def test_lease_names() -> None:
    assert lease_name("blast") == "elb-blast-submit-blast"
    assert is_submit_lease_name("elb-blast-submit-blast")
    assert not is_submit_lease_name("elb-gate-controller")
    assert not is_submit_lease_name(None)


def test_a_new_lease_is_held_from_now_and_reads_back_as_built() -> None:
    moment = T + timedelta(microseconds=7)
    body = new_lease(
        "blast", "elb-blast-wait-cli-1", "cli-1", 30, moment, labels={"a": "b"}, transitions=0
    )
    assert (body["apiVersion"], body["kind"]) == ("coordination.k8s.io/v1", "Lease")
    assert body["metadata"] == {
        "name": "elb-blast-wait-cli-1",
        "namespace": "blast",
        "labels": {"a": "b"},
    }
    assert body["spec"]["leaseTransitions"] == 0
    view = LeaseView.from_dict(body)
    assert (view.holder, view.duration_seconds) == ("cli-1", 30)
    assert view.acquire_time == view.renew_time == moment
    # Without labels or transitions the body carries neither (what the submit clients write).
    plain = new_lease("blast", "elb-blast-submit-blast", "cli-1", 900, moment)
    assert "labels" not in plain["metadata"] and "leaseTransitions" not in plain["spec"]
