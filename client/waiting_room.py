"""``WaitingRoom``: a waiter's watches and its place in the line (the I/O around
:mod:`client.waiting_line`).

    room = WaitingRoom(kube, namespace, holder, settings.gate)
    room.enter()                       # watch the Lease, the search Jobs and the line; queue
    why = room.wait(5.0, cancel)       # returns when it is this waiter's turn (or fallback)
    room.tried("full")                 # what the try found
    room.leave()                       # stop watching, leave the line

The three watches (LIST then WATCH, resumed after the server ends a stream, listed again
after a 410) run as tasks on the :class:`SyncKube`'s event loop; :meth:`wait` runs in
the caller's thread. An identity that may not watch, or may not write its line entry,
still works: it falls back to polling, or to a random stagger instead of a place in line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from client import waiting_line as wl
from client.sync_kube import SyncKube
from elbgate.kube.api import JOBS, LEASES, ApiError, ApiUnavailable, KubeApi, path
from elbgate.names import SEARCH_JOB_SELECTOR, UNFINISHED_JOB_FIELD_SELECTOR, lease_name
from elbgate.settings import GateSettings

log = logging.getLogger(__name__)
Json = dict[str, Any]
WATCH_SECONDS = 240
RETRY_SECONDS = (1.0, 30.0)
"""First and longest pause before a broken watch is listed again (doubling)."""
TICK_SECONDS = 0.25
"""Longest sleep of :meth:`WaitingRoom.wait` between looks at ``cancel``."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class WaitingRoom:
    """One waiter's view of the gates and of the line; thread-safe."""

    def __init__(
        self,
        kube: SyncKube,
        namespace: str,
        holder: str,
        gate: GateSettings,
        *,
        step: float = wl.HANDOFF_STEP_SECONDS,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.holder = holder
        self.gate = gate
        self.step = step
        self._clock = clock
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self._spread = self._rng.uniform(0, step)
        self._cond = threading.Condition()
        self._lease: Json | None = None
        self._jobs: dict[str, Json] = {}
        self._entries: dict[str, wl.Entry] = {}
        self._synced: set[str] = set()
        self._blind: set[str] = set()
        """Watches that cannot run (forbidden): only the fallback poll serves them."""
        self._jobs_generation = 0
        self._doubt_generation = -1
        """A try found the namespace full at this Jobs generation although the watches
        said there was room: trust them again only once the Jobs change."""
        self._open_since: float | None = None
        self._queued = False
        self._tasks: list[concurrent.futures.Future[Any]] = []
        self.entered = False
        self.wakeups = 0
        """Tries this room started because the watches said a slot was free."""

    # -- lifecycle ----------------------------------------------------------------------

    def enter(self) -> None:
        """Start the watches and join the line (once; later calls do nothing)."""
        if self.entered:
            return
        self.entered = True
        ns = self.namespace
        self._start(
            self._reflect(
                "lease",
                path(LEASES, ns),
                None,
                f"metadata.name={lease_name(ns)}",
                self._on_lease,
            )
        )
        self._start(
            self._reflect(
                "jobs",
                path(JOBS, ns),
                SEARCH_JOB_SELECTOR,
                UNFINISHED_JOB_FIELD_SELECTOR,
                self._on_job,
            )
        )
        self._start(
            self._reflect("line", path(LEASES, ns), wl.WAITING_SELECTOR, None, self._on_entry)
        )
        try:
            body = wl.entry_body(ns, self.holder, self._clock())
            self.kube.run(lambda api: api.create(path(LEASES, ns), body))
            self._queued = True
            self._start(self._keep_entry())
        except (ApiError, ApiUnavailable) as exc:
            # No line for this identity (e.g. RBAC without create on leases): it still
            # waits, staggered at random instead of by position.
            log.info("waiting without a place in line: %s", exc)

    def leave(self) -> None:
        """Stop watching and remove this waiter's line entry (best effort)."""
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        if self._queued:
            self._queued = False
            name = wl.entry_name(self.holder)
            try:
                self.kube.run(lambda api: api.delete(path(LEASES, self.namespace, name)))
            except (ApiError, ApiUnavailable) as exc:
                log.info("could not leave the line (its entry expires by itself): %s", exc)
        self.entered = False

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        loop = self.kube.loop
        self._tasks.append(asyncio.run_coroutine_threadsafe(coro, loop))

    # -- waiting ------------------------------------------------------------------------

    @property
    def blind(self) -> frozenset[str]:
        """The watches this identity may not run (``lease``, ``jobs``, ``line``)."""
        with self._cond:
            return frozenset(self._blind)

    @property
    def watching(self) -> bool:
        """All three watches have listed what exists and none is blind."""
        with self._cond:
            return self._synced >= {"lease", "jobs", "line"} and not self._blind

    def position(self) -> int | None:
        """Waiters ahead of this one (``None``: not in line)."""
        with self._cond:
            return self._position()

    def _position(self) -> int | None:
        if not self._queued:
            return None
        now = self._clock()
        skew = self.gate.clock_skew_seconds
        return wl.position(self.holder, self._entries.values(), now, skew)

    def wait(
        self, poll_seconds: float, cancel: threading.Event, at_most: float | None = None
    ) -> str:
        """Block until this waiter should try (its turn, or the fallback poll), or
        ``cancel`` is set, or ``at_most`` seconds passed (a deadline); returns why.
        ``poll_seconds`` is the fallback interval while the watches are not healthy
        (jittered ±20%)."""
        interval = poll_seconds
        if self.watching:
            interval = max(poll_seconds, wl.SAFETY_POLL_SECONDS)
        fallback_at = self._monotonic() + interval * self._rng.uniform(0.8, 1.2)
        if at_most is not None:
            fallback_at = min(fallback_at, self._monotonic() + at_most)
        while True:
            if cancel.is_set():
                return "cancelled"
            with self._cond:
                self._judge()
                now = self._monotonic()
                step = wl.turn(
                    ahead=self._position(),
                    open_since=self._open_since,
                    fallback_at=fallback_at,
                    now=now,
                    step=self.step,
                    spread=self._spread,
                )
                if step.try_now:
                    if self._open_since is not None:
                        self.wakeups += 1
                    self._open_since = None
                    return step.why
                pause = min(max(step.look_again_at - now, 0.0), TICK_SECONDS)
                self._cond.wait(pause)

    def tried(self, outcome: str) -> None:
        """Report a try's outcome (``busy``, ``full``, ``won``) so a wrong view does not
        make this waiter try again before something changes."""
        with self._cond:
            if outcome == "full":
                self._doubt_generation = self._jobs_generation
            self._open_since = None

    def _judge(self) -> None:
        """Recompute whether a try could succeed (under the lock)."""
        if not ({"lease", "jobs"} <= self._synced) or self._blind & {"lease", "jobs"}:
            self._open_since = None
            return
        gate = self.gate
        view = wl.slot_view(
            self._lease,
            self._jobs.values(),
            self._clock(),
            ceiling=gate.max_run_concurrency,
            expiry=gate.expiry,
            grace_seconds=gate.finalizer_grace_seconds,
        )
        trusted = self._jobs_generation > self._doubt_generation
        if view.open and trusted:
            if self._open_since is None:
                self._open_since = self._monotonic()
        else:
            self._open_since = None

    def _changed(self) -> None:
        self._judge()
        self._cond.notify_all()

    # -- what the watches bring (event-loop thread) ---------------------------------------

    def _on_lease(self, kind: str, obj: Json | None) -> None:
        with self._cond:
            self._lease = None if kind == "DELETED" else obj
            self._changed()

    def _on_job(self, kind: str, obj: Json | None) -> None:
        with self._cond:
            if obj is None:  # a fresh LIST starts over
                self._jobs.clear()
            else:
                name = str((obj.get("metadata") or {}).get("name"))
                if kind == "DELETED":
                    self._jobs.pop(name, None)
                else:
                    self._jobs[name] = obj
            self._jobs_generation += 1
            self._changed()

    def _on_entry(self, kind: str, obj: Json | None) -> None:
        with self._cond:
            if obj is None:
                self._entries.clear()
            else:
                entry = wl.Entry.from_lease(obj)
                if kind == "DELETED":
                    self._entries.pop(entry.name, None)
                else:
                    self._entries[entry.name] = entry
            self._changed()

    async def _reflect(
        self,
        name: str,
        url: str,
        label_selector: str | None,
        field_selector: str | None,
        on_event: Callable[[str, Json | None], None],
    ) -> None:
        """LIST then WATCH ``url`` until cancelled, handing each change to ``on_event``
        (``obj=None``: a new LIST begins; then an ``ADDED`` per item)."""
        api = self.kube.api
        pause = RETRY_SECONDS[0]
        while True:
            try:
                body = await api.list_objects(
                    url, label_selector=label_selector, field_selector=field_selector
                )
                version = str((body.get("metadata") or {}).get("resourceVersion") or "")
                items = body.get("items") or []
                with self._cond:
                    if name != "lease":
                        on_event("LIST", None)
                    elif not items:
                        on_event("DELETED", None)
                    for item in items:
                        on_event("ADDED", item)
                    self._synced.add(name)
                    self._changed()
                while True:
                    async for event in api.watch(
                        url,
                        resource_version=version,
                        label_selector=label_selector,
                        field_selector=field_selector,
                        timeout_seconds=WATCH_SECONDS,
                    ):
                        obj = event.get("object") or {}
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        kind = str(event.get("type"))
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            on_event(kind, obj)
                        pause = RETRY_SECONDS[0]
                        if name == "line":
                            with self._cond:
                                head = self._position() == 0
                            if head:
                                await self._sweep_stale(api)
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.code in (401, 403):
                    log.info("cannot watch %s (%s): polling instead", name, exc)
                    with self._cond:
                        self._blind.add(name)
                        self._changed()
                    return
                await self._lost(name, pause)  # 410 Gone and the rest: list again
                pause = min(pause * 2, RETRY_SECONDS[1])
            except ApiUnavailable:
                await self._lost(name, pause)
                pause = min(pause * 2, RETRY_SECONDS[1])

    async def _lost(self, name: str, pause: float) -> None:
        with self._cond:
            self._synced.discard(name)
            self._changed()
        await asyncio.sleep(pause)

    async def _sweep_stale(self, api: KubeApi) -> None:
        """The head of the line deletes the entries of waiters that are gone."""
        with self._cond:
            stale = wl.stale_entries(
                self._entries.values(), self._clock(), self.gate.clock_skew_seconds
            )
        for entry in stale:
            await _quietly(
                api.delete(
                    path(LEASES, self.namespace, entry.name),
                    resource_version=entry.resource_version,
                )
            )

    async def _keep_entry(self) -> None:
        """Renew this waiter's line entry until cancelled; re-create it if it vanished."""
        api = self.kube.api
        url = path(LEASES, self.namespace, wl.entry_name(self.holder))
        while True:
            await asyncio.sleep(wl.ENTRY_RENEW_SECONDS)
            try:
                current = await api.get(url)
                await api.replace(url, wl.renewed_body(current, self._clock()))
            except ApiError as exc:
                if exc.not_found:
                    body = wl.entry_body(self.namespace, self.holder, self._clock())
                    await _quietly(api.create(path(LEASES, self.namespace), body))
            except ApiUnavailable:
                continue


async def _quietly(call: Awaitable[Any]) -> None:
    try:
        await call
    except (ApiError, ApiUnavailable):
        pass
