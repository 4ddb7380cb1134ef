"""Plays the Job controller: finishes the demo's Jobs through the status subresource.

A batch (``app=submit``/``app=blast``) Job succeeds 2-5 s after it appears; a
finalizer succeeds shortly after every batch Job of its search has succeeded, as
elastic-blast's finalizer waits for its batch work. A finalizer whose batch work
never appears keeps running: that is the orphan the controller finds.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from elbgate.census import is_terminal
from elbgate.names import APP_LABEL, COMPANION_APPS, FINALIZER_APP, JOB_ID_LABEL
from tests.kube_emulator import ApiError, Emulator

FINALIZER_DELAY_SECONDS = 0.3
TICK_SECONDS = 0.1


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def succeeded_status(job: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """``status`` of a Job whose one pod succeeded (batch/v1 as the Job controller writes it)."""
    stamp = _rfc3339(now)
    return {
        "startTime": (job.get("metadata") or {}).get("creationTimestamp", stamp),
        "completionTime": stamp,
        "succeeded": 1,
        "active": 0,
        "ready": 0,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": stamp,
             "lastTransitionTime": stamp},
            {"type": "Complete", "status": "True", "lastProbeTime": stamp,
             "lastTransitionTime": stamp},
        ],
    }  # fmt: skip


class JobRunner(threading.Thread):
    """Polls the namespace's Jobs (in process, no API call) and finishes them when due."""

    def __init__(
        self,
        emu: Emulator,
        namespace: str,
        *,
        min_seconds: float = 2.0,
        max_seconds: float = 5.0,
        seed: int | None = None,
    ) -> None:
        super().__init__(name="demo-job-runner", daemon=True)
        self.emu = emu
        self.namespace = namespace
        self.min_seconds, self.max_seconds = min_seconds, max_seconds
        self._random = random.Random(seed)
        self._due: dict[str, float] = {}
        """Job name -> monotonic time it finishes."""
        self._done: set[str] = set()
        self._stop_event = threading.Event()
        self.finished = 0

    def stop(self) -> None:
        """Stop and wait for the thread."""
        self._stop_event.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(10)

    def run(self) -> None:
        while not self._stop_event.wait(TICK_SECONDS):
            try:
                self._tick(time.monotonic())
            except Exception:  # the emulator is stopping; the next tick (if any) retries
                continue

    def _tick(self, now: float) -> None:
        jobs = self.emu.list("jobs", self.namespace)
        by_search: dict[str, list[dict[str, Any]]] = {}
        for job in jobs:
            labels = job["metadata"].get("labels") or {}
            by_search.setdefault(str(labels.get(JOB_ID_LABEL) or ""), []).append(job)
        for job in jobs:
            name = job["metadata"]["name"]
            if name in self._due or name in self._done or is_terminal(job):
                continue
            labels = job["metadata"].get("labels") or {}
            app = labels.get(APP_LABEL)
            if app in COMPANION_APPS:
                self._due[name] = now + self._random.uniform(self.min_seconds, self.max_seconds)
            elif app == FINALIZER_APP:
                companions = [
                    j for j in by_search.get(str(labels.get(JOB_ID_LABEL) or ""), [])
                    if (j["metadata"].get("labels") or {}).get(APP_LABEL) in COMPANION_APPS
                ]  # fmt: skip
                if companions and all(_succeeded(j) for j in companions):
                    self._due[name] = now + FINALIZER_DELAY_SECONDS
        for name, when in list(self._due.items()):
            if when <= now:
                self._finish(name)
                del self._due[name]
                self._done.add(name)

    def _finish(self, name: str) -> None:
        for _ in range(5):
            job = self.emu.find("jobs", self.namespace, name)
            if job is None or is_terminal(job):
                return
            job["status"] = succeeded_status(job, datetime.now(UTC))
            try:
                self.emu.update_status(job)
            except ApiError:  # conflict with another writer (the controller's mark): re-read
                continue
            self.finished += 1
            return


def _succeeded(job: Mapping[str, Any]) -> bool:
    status = job.get("status") or {}
    return isinstance(status.get("succeeded"), int) and status["succeeded"] > 0
