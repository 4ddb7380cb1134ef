"""Handoff latency and burst makespan, from what a watch of the search Jobs saw. Pure.

A burst: ``n`` submitters start at once, each with one search of equal size, in a
namespace whose ceiling is ``c``. The observer (:class:`SearchObserver`) watches every
search Job and, after each event, takes the census elb-gate's gates take
(:func:`elbgate.census.census`), noting on its own monotonic clock

* when each search was **admitted**: its first Job appeared (the API server admitted
  it, webhook included);
* when each search **finished**: the census stopped counting it (its last unfinished
  Job went terminal): the slot is free from then on.

From those (:func:`analyse`):

* **handoff latency**: each slot freed while some search was still waiting is matched
  with the next admission (oldest free slot first); the latency is the time between.
  Admissions with no freed slot pending fill the slots free at the start and are
  reported as *start-up* (time since the burst started);
* **makespan**: burst start to the last search finished, against the ideal packing
  ``sum(durations) / c`` (each duration: admitted to finished, as measured). With equal
  searches, whole waves bound it too: ``ceil(n / c) x mean duration`` (``n`` = 10,
  ``c`` = 3 is 4 waves, 1.2x the sum bound: no schedule reaches ``sum / c`` there).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from elbgate.census import census
from elbgate.names import JOB_ID_LABEL


@dataclass
class Timeline:
    """When the burst started and when each search was admitted and finished
    (seconds on one monotonic clock)."""

    started: float
    ceiling: int
    admitted: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BurstResult:
    """What one burst came to."""

    searches: int
    finished: int
    handoffs: tuple[float, ...]
    startups: tuple[float, ...]
    matched: tuple[tuple[float, float, str], ...]
    """Each handoff as (slot freed at, admitted at, the search admitted)."""
    durations: tuple[float, ...]
    makespan: float
    """Burst start to the last search finished."""
    span: float
    """First admission to the last search finished (without the submitters' start-up)."""
    ideal: float
    """sum(durations) / ceiling."""
    waves: float
    """ceil(searches / ceiling) x mean duration: the best whole-wave schedule."""

    @property
    def makespan_ratio(self) -> float:
        return self.makespan / self.ideal if self.ideal > 0 else math.nan

    @property
    def waves_ratio(self) -> float:
        return self.makespan / self.waves if self.waves > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "searches": self.searches,
            "finished": self.finished,
            "handoffs_s": list(self.handoffs),
            "startups_s": list(self.startups),
            "durations_s": list(self.durations),
            "makespan_s": self.makespan,
            "span_s": self.span,
            "ideal_s": self.ideal,
            "waves_s": self.waves,
            "makespan_ratio": self.makespan_ratio,
            "waves_ratio": self.waves_ratio,
        }


def analyse(t: Timeline) -> BurstResult:
    """Handoffs, start-ups, durations and makespan of one burst (see the module doc)."""
    done = {k: v for k, v in t.finished.items() if k in t.admitted}
    durations = tuple(done[k] - t.admitted[k] for k in sorted(done))
    events: list[tuple[float, int, str]] = []
    for key, at in t.finished.items():
        waiting = any(a > at for a in t.admitted.values())
        if waiting:
            events.append((at, 0, key))  # a slot frees (sorted before a same-time admission)
    for key, at in t.admitted.items():
        events.append((at, 1, key))
    pending: deque[float] = deque()
    handoffs: list[float] = []
    startups: list[float] = []
    matched: list[tuple[float, float, str]] = []
    for at, kind, key in sorted(events):
        if kind == 0:
            pending.append(at)
        elif pending:
            freed = pending.popleft()
            handoffs.append(at - freed)
            matched.append((freed, at, key))
        else:
            startups.append(at - t.started)
    makespan = (max(done.values()) - t.started) if done else math.nan
    span = (max(done.values()) - min(t.admitted.values())) if done else math.nan
    total = sum(durations)
    mean = total / len(durations) if durations else math.nan
    return BurstResult(
        searches=len(t.admitted),
        finished=len(done),
        handoffs=tuple(handoffs),
        startups=tuple(startups),
        matched=tuple(matched),
        durations=durations,
        makespan=makespan,
        span=span,
        ideal=total / t.ceiling if durations else math.nan,
        waves=math.ceil(len(t.admitted) / t.ceiling) * mean if durations else math.nan,
    )


class SearchObserver:
    """Fed every event of a watch of the namespace's search Jobs (from any thread):
    keeps the Jobs, takes the census after each event and writes the
    :class:`Timeline`. Only searches whose ids are in ``ids`` are timed."""

    def __init__(self, ids: set[str], ceiling: int, grace_seconds: float) -> None:
        self.ids = ids
        self.grace = grace_seconds
        self.timeline = Timeline(started=time.monotonic(), ceiling=ceiling)
        self.peak = 0
        """Most searches of the burst the census ever counted at once."""
        self._jobs: dict[str, Mapping[str, Any]] = {}
        self._active: set[str] = set()
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)

    def start(self) -> None:
        """The burst starts now."""
        with self._lock:
            self.timeline.started = time.monotonic()

    def on_event(self, kind: str, obj: Mapping[str, Any]) -> None:
        at = time.monotonic()
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        job_id = str((meta.get("labels") or {}).get(JOB_ID_LABEL) or "")
        if job_id not in self.ids:
            return  # a search's census depends on its own Jobs only
        with self._lock:
            if kind == "DELETED":
                self._jobs.pop(name, None)
            else:
                self._jobs[name] = obj
            if kind == "ADDED":
                self.timeline.admitted.setdefault(job_id, at)
            counted = census(self._jobs.values(), datetime.now(UTC), self.grace)
            active = {k for k in counted.active_ids if k in self.ids}
            for gone in self._active - active:
                self.timeline.finished[gone] = at
            self._active = active
            self.peak = max(self.peak, len(active))
            self.changed.notify_all()

    def _done(self, expected: int) -> bool:
        admitted = set(self.timeline.admitted)
        return (
            len(admitted) >= expected
            and admitted <= set(self.timeline.finished)
            and not self._active
        )

    def wait_all_finished(self, expected: int, timeout: float) -> bool:
        """Wait until ``expected`` searches were admitted and every admitted one finished."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._done(expected):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 1.0))
        return True
