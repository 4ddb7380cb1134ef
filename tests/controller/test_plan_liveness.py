"""Plan tables: the auto-stop liveness feed (in use / idle, transitions, write-on-change,
heartbeat)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.actions import WriteLiveness
from controller.liveness import format_time
from controller.plan import Plan, make_plan
from tests.builders import HOLDER, NOW, ago, job_doc, lease_view, sections, snapshot


def written(found: Plan) -> WriteLiveness | None:
    writes = [a for a in found.actions if isinstance(a, WriteLiveness)]
    assert len(writes) <= 1
    return writes[0] if writes else None


def idle_data(idle_since: str, updated: str, last_active: str = "") -> dict[str, str]:
    return {
        "inUse": "false",
        "activeSearches": "0",
        "activeJobIds": "",
        "leaseHolder": "",
        "lastActiveTime": last_active,
        "idleSince": idle_since,
        "updatedAt": updated,
    }


@pytest.mark.parametrize(
    ("name", "snap_kw", "in_use"),
    [
        ("nothing at all is idle", {}, False),
        ("a held, unexpired Lease is in use", {"lease": lease_view(renewed_ago=10)}, True),
        ("an expired Lease is not in use", {"lease": lease_view(renewed_ago=5000)}, False),
        ("a free Lease is not in use", {"lease": lease_view(holder="")}, False),
        ("an unfinished blast Job is in use", {"jobs": [job_doc("b", app="blast")]}, True),
        (
            "a finalizer still merging results is in use",
            {"jobs": [job_doc("f", app="finalizer", age=10)]},
            True,
        ),
        (
            "a DB warm-up is in use",
            {"jobs": [job_doc("w", app="elb-db-warmup", job_id=None)]},
            True,
        ),
        (
            "a DB preparation is in use",
            {"jobs": [job_doc("p", app="elb-prepare-db", job_id=None)]},
            True,
        ),
        (
            "a DB order oracle is in use",
            {"jobs": [job_doc("o", app="elb-db-order-oracle", job_id=None)]},
            True,
        ),
        (
            "a Job of an app that is no liveness app is not",
            {"jobs": [job_doc("j", app="janitor", job_id=None)]},
            False,
        ),
        ("finished Jobs are not", {"jobs": [job_doc("b", app="blast", finished=True)]}, False),
    ],
)
def test_in_use_table(name: str, snap_kw: dict[str, Any], in_use: bool) -> None:
    found = make_plan(snapshot(**snap_kw), {}, None, NOW, *sections())
    assert found.liveness.in_use is in_use, name
    write = written(found)
    assert write is not None and write.why == "created"
    assert write.data["inUse"] == ("true" if in_use else "false")


def test_liveness_apps_are_configurable() -> None:
    snap = snapshot(jobs=[job_doc("w", app="elb-db-warmup", job_id=None)])
    found = make_plan(
        snap, {}, None, NOW, *sections(liveness_apps=("finalizer", "submit", "blast"))
    )
    assert not found.liveness.in_use


def test_the_configmap_lists_active_searches_and_the_holder() -> None:
    snap = snapshot(
        lease=lease_view(renewed_ago=10),
        jobs=[job_doc("b1", app="blast", job_id="s2"), job_doc("f1", job_id="s1", age=10)],
    )
    write = written(make_plan(snap, {}, None, NOW, *sections()))
    assert write is not None
    assert write.data == {
        "inUse": "true",
        "activeSearches": "2",
        "activeJobIds": "s1,s2",
        "leaseHolder": HOLDER,
        "lastActiveTime": format_time(NOW),
        "idleSince": "",
        "updatedAt": format_time(NOW),
    }


def test_a_first_idle_write_has_no_last_activity_and_is_idle_since_now() -> None:
    write = written(make_plan(snapshot(), {}, None, NOW, *sections()))
    assert write is not None
    assert write.data == idle_data(format_time(NOW), format_time(NOW))
    assert write.resource_version == ""  # create


def test_steady_idle_state_writes_nothing() -> None:
    previous = idle_data(format_time(ago(3600)), format_time(ago(5)), format_time(ago(4000)))
    found = make_plan(snapshot(liveness=previous), {}, None, NOW, *sections())
    assert found.actions == ()
    assert found.liveness.idle_seconds() == 3600


def test_steady_in_use_state_writes_nothing_between_heartbeats() -> None:
    previous = {
        "inUse": "true",
        "activeSearches": "0",
        "activeJobIds": "",
        "leaseHolder": HOLDER,
        "lastActiveTime": format_time(ago(20)),
        "idleSince": "",
        "updatedAt": format_time(ago(20)),
    }
    found = make_plan(snapshot(lease=lease_view(), liveness=previous), {}, None, NOW, *sections())
    assert found.actions == ()


@pytest.mark.parametrize(
    ("updated_ago", "due"),
    [(5, False), (26, False), (27, True), (90, True)],  # heartbeat at 0.9 x 30 s resync
)
def test_the_heartbeat_refreshes_updated_at_once_per_resync(updated_ago: int, due: bool) -> None:
    previous = idle_data(format_time(ago(3600)), format_time(ago(updated_ago)))
    write = written(make_plan(snapshot(liveness=previous), {}, None, NOW, *sections()))
    if due:
        assert write is not None and write.why == "heartbeat"
        assert write.data == {**previous, "updatedAt": format_time(NOW)}
        assert write.resource_version == "90"  # CAS on what we saw
    else:
        assert write is None


def test_an_unreadable_updated_at_is_refreshed() -> None:
    previous = idle_data(format_time(ago(3600)), "garbage")
    write = written(make_plan(snapshot(liveness=previous), {}, None, NOW, *sections()))
    assert write is not None and write.why == "heartbeat"


def test_in_use_to_idle_starts_the_idle_clock_and_keeps_the_last_sighting() -> None:
    previous = {
        "inUse": "true",
        "activeSearches": "1",
        "activeJobIds": "s1",
        "leaseHolder": "",
        "lastActiveTime": format_time(ago(25)),
        "idleSince": "",
        "updatedAt": format_time(ago(25)),
    }
    found = make_plan(snapshot(liveness=previous), {}, ago(2), NOW, *sections())
    write = written(found)
    assert write is not None and write.why == "changed"
    assert write.data["inUse"] == "false"
    assert write.data["idleSince"] == format_time(NOW)
    assert write.data["lastActiveTime"] == format_time(ago(2))  # this process saw it 2 s ago


def test_a_new_leader_without_a_sighting_keeps_the_written_last_activity() -> None:
    previous = {
        "inUse": "true",
        "activeSearches": "1",
        "activeJobIds": "s1",
        "leaseHolder": "",
        "lastActiveTime": format_time(ago(25)),
        "idleSince": "",
        "updatedAt": format_time(ago(25)),
    }
    write = written(make_plan(snapshot(liveness=previous), {}, None, NOW, *sections()))
    assert write is not None and write.data["lastActiveTime"] == format_time(ago(25))


def test_idle_to_in_use_clears_idle_since() -> None:
    previous = idle_data(format_time(ago(3600)), format_time(ago(5)))
    found = make_plan(snapshot(lease=lease_view(), liveness=previous), {}, None, NOW, *sections())
    write = written(found)
    assert write is not None and write.why == "changed"
    assert write.data["inUse"] == "true"
    assert write.data["idleSince"] == ""
    assert write.data["lastActiveTime"] == format_time(NOW)
    assert found.liveness.idle_seconds() == 0


def test_staying_idle_keeps_the_original_idle_since() -> None:
    previous = idle_data(format_time(ago(7200)), format_time(ago(40)))
    write = written(make_plan(snapshot(liveness=previous), {}, None, NOW, *sections()))
    assert write is not None and write.data["idleSince"] == format_time(ago(7200))
