"""The API server's audit log, read as it grows and kept per namespace.

The control plane logs every Job and Lease write at ``RequestResponse`` level, one
JSON event a line (:mod:`testbed.reliability.gate_a` reads them). A soak writes
hundreds of thousands of them: :class:`AuditTail` reads only what was appended since
its last call, and keeps the committed writes of the namespaces it was asked about, and
their deletes answered with a ``Status`` by ``uid`` (the watch's ``DELETED`` event
gives such a delete its revision), and their writes answered ``504`` (the watch event
they account for gives them theirs): :meth:`AuditTail.account`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.audit_log import read_audit
from testbed.reliability.gate_a import Delete, LostAnswer, Write, recorded


@dataclass(frozen=True)
class Seen:
    """A write a watch delivered: its revision, the object and its previous revision."""

    rv: int
    resource: str
    name: str
    previous: int | None
    """The object's revision before (``None``: it was created here)."""
    obj: Mapping[str, Any]


class AuditTail:
    """Committed writes per namespace, from an audit log file read incrementally."""

    def __init__(self, path: Path, namespaces: Iterable[str]) -> None:
        self.path = path
        self.namespaces = set(namespaces)
        self._offset = 0
        self._lock = threading.Lock()
        self.writes: dict[str, list[Write]] = {ns: [] for ns in self.namespaces}
        self.deletes: dict[str, dict[str, Delete]] = {ns: {} for ns in self.namespaces}
        self.lost: dict[str, list[LostAnswer]] = {ns: [] for ns in self.namespaces}

    def skip_to_end(self) -> None:
        """Ignore what is in the log now (earlier runs' writes)."""
        with self._lock:
            try:
                self._offset = self.path.stat().st_size
            except FileNotFoundError:
                self._offset = 0

    def poll(self) -> None:
        """Read what was appended, and keep what it committed in the namespaces."""
        with self._lock:
            appended, self._offset = read_audit(self.path, self._offset)
            for found in map(recorded, appended):
                if found is None or found.namespace not in self.namespaces:
                    continue
                if isinstance(found, Delete):
                    self.deletes[found.namespace][found.uid] = found
                elif isinstance(found, LostAnswer):
                    self.lost[found.namespace].append(found)
                else:
                    self.writes[found.namespace].append(found)

    def account(
        self, namespace: str, seen: Sequence[Seen], deleted: Mapping[str, int]
    ) -> tuple[list[Write], set[int], set[int]]:
        """The namespace's committed writes in resourceVersion order, with each delete of
        ``deleted`` (``uid`` → the revision of its watch ``DELETED`` event) and each write
        answered ``504`` that accounts for a ``seen`` revision placed there; and the
        revisions of ``seen`` and of ``deleted`` the log does not account for (yet)."""
        with self._lock:
            writes = list(self.writes[namespace])
            gone = self.deletes[namespace]
            unused = list(self.lost[namespace])
        known = {w.rv for w in writes}
        placed = [gone[uid].at(rv) for uid, rv in deleted.items() if uid in gone]
        missing_deletes = {rv for uid, rv in deleted.items() if uid not in gone}
        missing: set[int] = set()
        for s in sorted(seen, key=lambda s: s.rv):
            if s.rv in known:
                continue
            found = _answer_lost(unused, s)
            if found is None:
                missing.add(s.rv)
            else:
                unused.remove(found)
                placed.append(found.at(s.rv, s.obj))
        return sorted(writes + placed, key=lambda w: w.rv), missing, missing_deletes


def _answer_lost(lost: Sequence[LostAnswer], s: Seen) -> LostAnswer | None:
    """The write answered ``504`` that made ``s``: the same object; a create for an
    object created there; else an update whose precondition was the previous revision,
    or failing that the first write without one."""
    same = [w for w in lost if (w.resource, w.name) == (s.resource, s.name)]
    if s.previous is None:
        return next((w for w in same if w.verb == "create"), None)
    changes = [w for w in same if w.verb != "create"]
    cas = next((w for w in changes if w.precondition == str(s.previous)), None)
    return cas or next((w for w in changes if not w.precondition), None)
