"""The existing submit paths' task loop around their Lease clients, as it runs today.

Both paths (the dashboard's Celery task, the OpenAPI service's dispatcher) run the same
loop around their own Lease client (:mod:`testbed.clients`): take the Lease; busy → try
again after ``countdown`` (Celery ``countdown=30``); held → count the active searches
(the census LIST); at the ceiling → release and try again after ``countdown``; else run
``elastic-blast submit`` and release in ``finally``. Neither knows when a slot frees: it
finds out at its next look.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from testbed.api import ApiError
from testbed.clients import ClientError, LeaseClient

CELERY_COUNTDOWN_SECONDS = 30.0
"""How long a task that found the Lease busy or the namespace full waits (today)."""


@dataclass
class TaskOutcome:
    """How one task's run ended, as the task saw it."""

    exit_code: int | None = None
    """0 = its search was submitted; 1 = refused; ``None`` while running."""
    output: str = ""
    """What the submit printed (its error text when refused)."""
    lease_waits: int = 0
    """Episodes of finding the Lease busy."""
    capacity_waits: int = 0
    """Episodes of finding the namespace full (under the Lease)."""
    tries: int = 0
    errors: list[str] = field(default_factory=list)
    _state: str = field(default="", repr=False)

    def waiting(self, what: str) -> None:
        """Count waiting episodes (a change into a ``lease`` or ``capacity`` wait), as the
        CLI reports them; any other state ends a wait."""
        if what != self._state:
            self.lease_waits += int(what == "lease")
            self.capacity_waits += int(what == "capacity")
        self._state = what


class SubmitTask(threading.Thread):
    """One task submitting one search, in a thread."""

    def __init__(
        self,
        name: str,
        lease: LeaseClient,
        count_active: Callable[[], int],
        submit: Callable[[], tuple[bool, str]],
        *,
        ceiling: int,
        stop: threading.Event,
        countdown: float = CELERY_COUNTDOWN_SECONDS,
        jitter: float = 0.0,
    ) -> None:
        """``jitter``: each wait is ``countdown`` plus up to this much more, uniformly
        drawn (the dashboard's ``_gate_requeue_countdown``: 30 s + 0..10 s)."""
        super().__init__(name=name, daemon=True)
        self.lease = lease
        self.count_active = count_active
        self.submit = submit
        self.ceiling = ceiling
        self.stop_event = stop
        self.countdown = countdown
        self.jitter = jitter
        self.outcome = TaskOutcome()

    def run(self) -> None:
        out = self.outcome
        while not self.stop_event.is_set():
            out.tries += 1
            try:
                got = self.lease.acquire()
            except (ClientError, OSError) as exc:
                out.errors.append(f"Lease: {exc}")
                self.stop_event.wait(self._pause())
                continue
            if got == "busy":
                out.waiting("lease")
                self.stop_event.wait(self._pause())
                continue
            submitted = False
            try:
                if self.count_active() >= self.ceiling:
                    out.waiting("capacity")
                    continue  # released below, so other submitters are not blocked
                submitted = True
                ok, out.output = self.submit()
                out.exit_code = 0 if ok else 1
            except (ApiError, ClientError, OSError, ValueError) as exc:
                out.errors.append(f"{'submit' if submitted else 'census'}: {exc}")
                if submitted:
                    out.exit_code = 1
            finally:
                try:
                    self.lease.release()
                except (ClientError, OSError) as exc:
                    out.errors.append(f"release: {exc}")
                if not submitted:
                    self.stop_event.wait(self._pause())
            if submitted:
                return

    def _pause(self) -> float:
        return self.countdown + (random.uniform(0.0, self.jitter) if self.jitter else 0.0)
