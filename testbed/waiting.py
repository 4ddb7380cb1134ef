"""Waiting for a condition: poll until it holds, or fail after a deadline.

One synchronous helper (:func:`wait_until`) and its asynchronous twin
(:func:`wait_until_async`, which sleeps without blocking the event loop), used by the
test bed, the tests and the benchmarks alike. Both take ``(predicate, timeout, what)``,
return the predicate's first truthy value, and fail with an ``AssertionError`` that
names what was awaited and for how long, followed by ``detail()`` when given (a
process's last log lines, say). A predicate that knows waiting is pointless (the
process it waits for has exited) raises, and that error ends the wait.

And :func:`at_once`, which starts calls together (a race) and waits for them all.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def _fail_past(
    deadline: float, timeout: float, what: str, detail: Callable[[], str] | None
) -> None:
    if time.monotonic() >= deadline:
        message = f"timed out after {timeout:g}s waiting for {what}"
        raise AssertionError(message + (f"\n{detail()}" if detail is not None else ""))


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.1,
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` every ``interval`` seconds until it returns something truthy,
    and return that; ``AssertionError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        _fail_past(deadline, timeout, what, detail)
        time.sleep(interval)
    return value


async def wait_until_async(
    predicate: Callable[[], Any],
    # Not asyncio.timeout(): the failure must name what was awaited, like wait_until's.
    timeout: float,  # noqa: ASYNC109
    what: str,
    interval: float = 0.1,
    detail: Callable[[], str] | None = None,
) -> Any:
    """:func:`wait_until` on an event loop: ``predicate`` is synchronous, the sleeps
    between its calls let the loop run whatever should make it true."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        _fail_past(deadline, timeout, what, detail)
        await asyncio.sleep(interval)
    return value


def at_once(calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
    """Run every call from its own thread, all released by one barrier; return what each
    returned or raised (a ``TimeoutError`` for one still running after three minutes)."""
    barrier = threading.Barrier(len(calls))
    out: list[T | Exception] = [TimeoutError("did not return within 180 s")] * len(calls)

    def run(i: int) -> None:
        try:
            barrier.wait(60)
            out[i] = calls[i]()
        except Exception as exc:  # the caller's to judge
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    return out
