"""The admission record's pure edits (elbgate.reservations)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from elbgate.names import ADMISSION_RECORD_KEY, BATCH_WORK_RECORD_KEY
from elbgate.reservations import AdmissionRecord, reservation_of, without_entries

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _record(*names: str) -> dict[str, object]:
    entries = [reservation_of(n, "submit", f"job-{n}", (), (), NOW, 120).to_json() for n in names]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "elb-gate-admissions", "namespace": "blast", "resourceVersion": "42"},
        "data": {
            ADMISSION_RECORD_KEY: json.dumps(entries),
            BATCH_WORK_RECORD_KEY: json.dumps({"job-a": "2026-12-01T12:00:00.000000Z submit/a"}),
            "split-searches.json": "{}",
        },
    }


def test_a_stored_jobs_entry_is_dropped_and_everything_else_kept_for_the_swap() -> None:
    body = without_entries("blast", _record("a", "b"), {"a"})
    assert body is not None
    assert body["metadata"]["resourceVersion"] == "42"  # the compare-and-swap's version
    assert [e.name for e in AdmissionRecord.from_configmap("blast", body).entries] == ["b"]
    assert body["data"][BATCH_WORK_RECORD_KEY] == _record()["data"][BATCH_WORK_RECORD_KEY]  # type: ignore[index]
    assert body["data"]["split-searches.json"] == "{}"


def test_nothing_is_written_when_the_record_holds_no_such_entry() -> None:
    assert without_entries("blast", _record("b"), {"a"}) is None
    assert without_entries("blast", None, {"a"}) is None
