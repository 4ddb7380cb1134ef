"""The control plane's audit log: one JSON event a line, read from a byte offset.

The API server appends while a reader reads: only complete lines are returned, and the
offset handed back is where the next read starts (an unfinished last line is read
then). Every reader of the log goes through :func:`read_audit`, and so do the readers of
the components' own JSON-lines logs (:mod:`testbed.component`).
"""

from __future__ import annotations

import json
from pathlib import Path

from testbed.api import JsonObj


def read_audit(path: Path, offset: int = 0) -> tuple[list[JsonObj], int]:
    """Audit events appended since ``offset`` (complete lines only), and the new offset;
    ``([], offset)`` while the log does not exist yet."""
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            chunk = log.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    events = []
    for line in chunk[:end].splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # not an event (a blank line, or one the server cut short)
    return events, offset + end
