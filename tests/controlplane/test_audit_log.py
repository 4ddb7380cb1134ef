"""Every reader of the audit log reads it with one function, while the server appends.

The API server writes an event a line; a reader that catches a line half-written must
neither lose it nor return it twice: it gets the complete lines, and an offset that
starts the next read at the unfinished one.
"""

from __future__ import annotations

import json
from pathlib import Path

from testbed.audit_log import read_audit


def _event(n: int, ns: str = "blast") -> bytes:
    ref = {"namespace": ns, "resource": "jobs", "name": f"job-{n}"}
    return json.dumps({"auditID": str(n), "objectRef": ref}).encode()


def test_a_line_being_written_is_read_once_when_complete(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    half = _event(2)[:10]
    log.write_bytes(_event(1) + b"\n" + half)
    events, offset = read_audit(log)
    assert [e["auditID"] for e in events] == ["1"]
    assert offset == len(_event(1)) + 1
    with open(log, "ab") as out:
        out.write(_event(2)[10:] + b"\n" + _event(3) + b"\n")
    events, offset = read_audit(log, offset)
    assert [e["auditID"] for e in events] == ["2", "3"]
    assert read_audit(log, offset) == ([], offset) and offset == log.stat().st_size


def test_a_log_not_written_yet_reads_as_empty(tmp_path: Path) -> None:
    assert read_audit(tmp_path / "audit.log", 0) == ([], 0)
