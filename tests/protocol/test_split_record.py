"""The admission record's split marks: written with a shard's opening, carried by every
later write, dropped like the batch-work evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from elbgate.names import SPLIT_RECORD_KEY
from elbgate.reservations import (
    AdmissionRecord,
    Reservation,
    UnreadableRecord,
    reservation_of,
    split_searches_of,
)

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
TTL2 = 1800.0


def entry(name: str, job_id: str, at: datetime = NOW) -> Reservation:
    return reservation_of(name, "submit", job_id, (), (), at, 120)


def test_a_shard_is_marked_and_later_writes_carry_the_mark() -> None:
    first = AdmissionRecord("ns").written(
        entry("submit-jobs-a", "a"), (), (), NOW, TTL2, split="dashboard-split-"
    )
    assert split_searches_of(first) == {"a": "2026-11-29T12:00:00.000000Z dashboard-split-"}
    first["metadata"]["resourceVersion"] = "7"
    later = AdmissionRecord.from_configmap("ns", first).written(
        entry("submit-jobs-b", "b"), (), (), NOW + timedelta(seconds=5), TTL2
    )
    assert set(split_searches_of(later)) == {"a"}  # b is a regular search


def test_marks_go_once_their_search_is_unlisted_and_old() -> None:
    marked = AdmissionRecord("ns").written(
        entry("submit-jobs-a", "a"), (), (), NOW, TTL2, split="dashboard-split-"
    )
    record = AdmissionRecord.from_configmap("ns", marked)
    much_later = NOW + timedelta(seconds=TTL2 + 1)
    kept = record.written(entry("x", "x", much_later), (), {"a"}, much_later, TTL2)
    assert set(split_searches_of(kept)) == {"a"}  # its Jobs are still listed
    gone = record.written(entry("x", "x", much_later), (), (), much_later, TTL2)
    assert SPLIT_RECORD_KEY not in gone["data"]  # no marks: the key is not written at all


def test_an_unreadable_mark_table_is_refused_by_the_webhook_and_ignored_by_readers() -> None:
    obj = {"metadata": {"resourceVersion": "1"}, "data": {SPLIT_RECORD_KEY: "[1]"}}
    with pytest.raises(UnreadableRecord, match=r"split-searches\.json"):
        AdmissionRecord.from_configmap("ns", obj)
    assert split_searches_of(obj) == {}
