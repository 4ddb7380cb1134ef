"""Plays the Job controller: completes search Jobs after a random run time.

A search's batch Jobs (``submit``/``blast``) finish after a lifetime drawn from the
schedule's seed; a finalizer finishes once no companion of its search is still
running, as elastic-blast's finalizer does. Completion is a status write
(``emu.update_status``): ``succeeded``, ``completionTime`` and a ``Complete``
condition, which is what frees a slot.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime

from elbgate.census import is_terminal
from elbgate.names import APP_LABEL, COMPANION_APPS, FINALIZER_APP, JOB_ID_LABEL
from tests.kube_emulator import ApiError, Emulator


class JobCompletion:
    """One thread completing Jobs in the namespaces it is given."""

    def __init__(
        self, emu: Emulator, period: float = 0.1, lifetime: tuple[float, float] = (0.2, 1.2)
    ) -> None:
        self.emu = emu
        self.period = period
        self.lifetime = lifetime
        self.completed = 0
        self._seeds: dict[str, int] = {}
        self._first_seen: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="job-completion", daemon=True)

    def start(self) -> JobCompletion:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def add(self, namespace: str, seed: int) -> None:
        with self._lock:
            self._seeds[namespace] = seed

    def remove(self, namespace: str) -> None:
        with self._lock:
            self._seeds.pop(namespace, None)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            with self._lock:
                seeds = dict(self._seeds)
            for namespace, seed in seeds.items():
                try:
                    self._tick(namespace, seed)
                except ApiError:
                    pass  # a conflict with another writer: the next tick retries

    def _tick(self, namespace: str, seed: int) -> None:
        jobs = [j for j in self.emu.list("jobs", namespace) if not is_terminal(j)]
        running_ids = {
            (j["metadata"].get("labels") or {}).get(JOB_ID_LABEL)
            for j in jobs
            if (j["metadata"].get("labels") or {}).get(APP_LABEL) in COMPANION_APPS
        }
        now = time.monotonic()
        for job in jobs:
            meta = job["metadata"]
            labels = meta.get("labels") or {}
            key = (namespace, meta["name"], meta["uid"])
            first = self._first_seen.setdefault(key, now)
            life = random.Random(f"{seed}/{meta['name']}").uniform(*self.lifetime)
            if now - first < life:
                continue
            if labels.get(APP_LABEL) == FINALIZER_APP and labels.get(JOB_ID_LABEL) in running_ids:
                continue
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            job["status"] = {
                "succeeded": 1,
                "completionTime": stamp,
                "conditions": [{"type": "Complete", "status": "True"}],
            }
            self.emu.update_status(job)
            self.completed += 1
