"""Readiness: certificates loaded and the API server answering."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from elbgate.kube.api import ApiError, ApiUnavailable, KubeApi

FRESH_SECONDS = 10.0
"""An API answer this recent (a probe or any admission read) counts as reachable."""


@dataclass
class ApiReachability:
    """Remembers when the API last answered; probes ``/version`` when that is stale."""

    api: KubeApi
    timeout: float
    clock: Callable[[], float] = time.monotonic
    _last_answer: float | None = field(default=None, repr=False)
    last_error: str = ""

    def note_answer(self) -> None:
        """The API answered (any status but 401): it is reachable."""
        self._last_answer = self.clock()
        self.last_error = ""

    def note_unavailable(self, error: str) -> None:
        """An admission read got no answer: the last answer no longer vouches for the
        API, so the next ``/readyz`` probes ``/version`` instead of trusting an answer
        up to :data:`FRESH_SECONDS` old. A lone failed read while the API answers the
        probe leaves the replica ready; a cut API makes it not ready at the next probe
        (the readiness probe's period), not :data:`FRESH_SECONDS` later."""
        self._last_answer = None
        self.last_error = error

    async def reachable(self) -> bool:
        """True when the API answered within :data:`FRESH_SECONDS`, probing if needed."""
        if self._last_answer is not None and self.clock() - self._last_answer < FRESH_SECONDS:
            return True
        try:
            await self.api.get("/version", deadline=self.timeout)
        except ApiUnavailable as exc:
            self.last_error = str(exc)
            return False
        except ApiError as exc:
            if exc.code == 401:  # our credentials are refused: every read would fail
                self.last_error = f"API refused elb-gate's credentials: {exc.message}"
                return False
        self.note_answer()
        return True
