"""The control plane's audit log: one JSON event a line, read from a byte offset.

The API server appends while a reader reads: only complete lines are returned, and the
offset handed back is where the next read starts (an unfinished last line is read
then). Every reader of the log goes through :func:`read_audit`, and so do the readers of
the components' own JSON-lines logs (:mod:`testbed.component`); :func:`requests_to`
picks one object's requests out of the events.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
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


def requests_to(
    events: Iterable[JsonObj],
    resource: str,
    namespace: str,
    name: str | None = None,
    *,
    user: str | None = None,
    verbs: Collection[str] | None = None,
) -> list[JsonObj]:
    """The ``events`` of requests to ``resource`` in ``namespace`` (``name``: to that object
    only) made by ``user`` with one of ``verbs`` (any user or verb when not given)."""

    def wanted(event: JsonObj) -> bool:
        ref = event.get("objectRef") or {}
        return (
            (ref.get("resource"), ref.get("namespace")) == (resource, namespace)
            and (name is None or ref.get("name") == name)
            and (user is None or (event.get("user") or {}).get("username") == user)
            and (verbs is None or event.get("verb") in verbs)
        )

    return [e for e in events if wanted(e)]
