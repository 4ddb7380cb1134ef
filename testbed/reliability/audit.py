"""The API server's audit log, read as it grows and kept per namespace.

The control plane logs every Job and Lease write at ``RequestResponse`` level, one
JSON event a line (:mod:`testbed.reliability.gate_a` reads them). A soak writes
hundreds of thousands of them: :class:`AuditTail` reads only what was appended since
its last call, and keeps the committed writes of the namespaces it was asked about.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path

from testbed.reliability.gate_a import Write, committed_writes


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
            for ns in {e["objectRef"]["namespace"] for e in events}:
                self.writes[ns].sort(key=lambda w: w.rv)
            return kept

    def of(self, namespace: str) -> list[Write]:
        with self._lock:
            return list(self.writes[namespace])

    def missing(self, namespace: str, rvs: Iterable[int]) -> set[int]:
        """Which of ``rvs`` the log has no committed write of (yet)."""
        with self._lock:
            known = self.rvs[namespace]
            return {rv for rv in rvs if rv not in known}
