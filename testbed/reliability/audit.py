"""The API server's audit log, read as it grows and kept per namespace.

The control plane logs every Job and Lease write at ``RequestResponse`` level, one
JSON event a line (:mod:`testbed.reliability.gate_a` reads them). A soak writes
hundreds of thousands of them: :class:`AuditTail` reads only what was appended since
its last call, and keeps the committed writes of the namespaces it was asked about, and
their deletes answered with a ``Status`` by ``uid`` (the watch's ``DELETED`` event
gives such a delete its revision: :meth:`AuditTail.of`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from testbed.reliability.gate_a import Delete, Write, committed_deletes, committed_writes


class AuditTail:
    """Committed writes per namespace, from an audit log file read incrementally."""

    def __init__(self, path: Path, namespaces: Iterable[str]) -> None:
        self.path = path
        self.namespaces = set(namespaces)
        self._offset = 0
        self._partial = b""
        self._lock = threading.Lock()
        self.writes: dict[str, list[Write]] = {ns: [] for ns in self.namespaces}
        self.rvs: dict[str, set[int]] = {ns: set() for ns in self.namespaces}
        self.deletes: dict[str, dict[str, Delete]] = {ns: {} for ns in self.namespaces}

    def skip_to_end(self) -> None:
        """Ignore what is in the log now (earlier runs' writes)."""
        with self._lock:
            try:
                self._offset = self.path.stat().st_size
            except FileNotFoundError:
                self._offset = 0
            self._partial = b""

    def poll(self) -> int:
        """Read what was appended; returns how many committed writes were kept."""
        with self._lock:
            try:
                with open(self.path, "rb") as log:
                    log.seek(self._offset)
                    chunk = log.read()
            except FileNotFoundError:
                return 0
            self._offset += len(chunk)
            data = self._partial + chunk
            lines = data.split(b"\n")
            self._partial = lines.pop()  # an unfinished last line waits for the next poll
            events = []
            for line in lines:
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if (event.get("objectRef") or {}).get("namespace") in self.namespaces:
                    events.append(event)
            kept = 0
            for write in committed_writes(events):
                self.writes[write.namespace].append(write)
                self.rvs[write.namespace].add(write.rv)
                kept += 1
            for delete in committed_deletes(events):
                self.deletes[delete.namespace][delete.uid] = delete
                kept += 1
            for ns in {e["objectRef"]["namespace"] for e in events}:
                self.writes[ns].sort(key=lambda w: w.rv)
            return kept

    def of(self, namespace: str, deleted: Mapping[str, int] | None = None) -> list[Write]:
        """The namespace's committed writes in resourceVersion order, with each delete of
        ``deleted`` (``uid`` → the revision of its watch ``DELETED`` event) placed at its
        revision."""
        with self._lock:
            writes = list(self.writes[namespace])
            known = self.deletes[namespace]
            placed = [known[uid].at(rv) for uid, rv in (deleted or {}).items() if uid in known]
        return sorted(writes + placed, key=lambda w: w.rv)

    def missing(
        self, namespace: str, rvs: Iterable[int], deleted: Iterable[str] = ()
    ) -> tuple[set[int], set[str]]:
        """Which of ``rvs`` the log has no committed write of (yet), and which of the
        deleted ``uid``\\ s it has no delete of."""
        with self._lock:
            known = self.rvs[namespace]
            gone = self.deletes[namespace]
            return {rv for rv in rvs if rv not in known}, {u for u in deleted if u not in gone}
