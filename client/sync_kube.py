"""Synchronous access to the API for the submit-path client.

Why :class:`elbgate.kube.api.KubeApi` on a private event loop, rather than the
``kubernetes`` package's ``ApiClient``: the client then shares the webhook's and
the controller's API code path exactly — the same reads (``elbgate.kube.reads``:
the census LIST with its selectors, the Lease GET), the same typed failures
(:class:`ApiError` with the apiserver's Status vs. :class:`ApiUnavailable` for no
answer, which is what keeps "busy" and "outage" apart), the same deadlines and
the same configuration (:class:`KubeConfig`, which already delegates kubeconfig
parsing to the ``kubernetes`` package). The loop runs in one daemon thread, so a
Celery task, a heartbeat thread and the main thread can all call in safely, and
calls work even from code that already runs an event loop of its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig

T = TypeVar("T")

DEFAULT_TIMEOUT_SECONDS = 10.0
"""Deadline of one API call made by a submit path (not a webhook's hot path)."""


class SyncKube:
    """A :class:`KubeApi` driven from synchronous code. Close it when done."""

    def __init__(
        self,
        config: KubeConfig,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        user_agent: str = "elb-gate-client",
    ) -> None:
        self.config = config
        self.timeout = timeout
        self.api = KubeApi(config, timeout=timeout, user_agent=user_agent)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="elb-gate-kube", daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The private event loop (long-running tasks, e.g. watches, may run on it)."""
        return self._loop

    def run(self, call: Callable[[KubeApi], Coroutine[Any, Any, T]]) -> T:
        """Run ``call(api)`` on the private loop and return its result (or raise
        its exception). Every API call carries its own deadline; the margin here
        only guards against a wedged loop."""
        if self._closed:
            raise RuntimeError("SyncKube is closed")
        future = asyncio.run_coroutine_threadsafe(call(self.api), self._loop)
        return future.result(timeout=self.timeout * 3 + 5)

    def close(self) -> None:
        """Close the HTTP session and stop the loop thread (idempotent)."""
        if self._closed:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.api.close(), self._loop).result(timeout=5)
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> SyncKube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
