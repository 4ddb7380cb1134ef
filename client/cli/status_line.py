"""The submit's state on stderr: one updating line on a terminal (elapsed time
ticking), plain lines otherwise (logs, CI, Celery). stdout belongs to COMMAND."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from typing import TextIO

from client.slot import SlotEvent
from client.slot_machine import Phase
from elbgate.durations import format_duration

_WAITING = frozenset({Phase.WAITING_FOR_SUBMIT_SLOT, Phase.WAITING_FOR_CAPACITY})


def format_elapsed(seconds: float) -> str:
    """``7s``, ``12m30s``, ``1h2m3s``: the one duration format (:mod:`elbgate.durations`)."""
    return format_duration(max(0.0, seconds))


def format_event(event: SlotEvent, elapsed: float | None = None) -> str:
    """``elb-gate: waiting_for_capacity (waited 42s): 3/3 active: a, b, c``."""
    waited = event.waited_seconds if elapsed is None else elapsed
    head = f"elb-gate: {event.phase.value}"
    if event.phase in _WAITING:
        head += f" (waited {format_elapsed(waited)})"
    return f"{head}: {event.detail}" if event.detail else head


class StatusLine:
    """``update`` is the ``on_state`` callback of ``run_slot``; ``note`` prints a
    message on its own line. Call ``close`` when done."""

    def __init__(
        self,
        stream: TextIO,
        tty: bool | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        refresh_seconds: float = 1.0,
    ) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._monotonic = monotonic
        self._refresh = refresh_seconds
        self._lock = threading.Lock()
        self._event: SlotEvent | None = None
        self._event_at = 0.0
        self._open_line = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def update(self, event: SlotEvent) -> None:
        with self._lock:
            self._event, self._event_at = event, self._monotonic()
            if not self.tty:
                self._write_line(format_event(event))
                return
            self._draw()
            if event.phase not in _WAITING:
                self._end_line()
        if self.tty and event.phase in _WAITING:
            self._ensure_ticker()

    def note(self, text: str) -> None:
        with self._lock:
            self._end_line()
            self._write_line(text)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._end_line()

    # --- terminal drawing ------------------------------------------------------

    def _draw(self) -> None:
        event = self._event
        if event is None:
            return
        elapsed = event.waited_seconds + (self._monotonic() - self._event_at)
        width = shutil.get_terminal_size((100, 20)).columns - 1
        text = format_event(event, elapsed)
        if len(text) > width:
            text = text[: max(width - 1, 10)] + "…"
        self.stream.write("\r\x1b[2K" + text)
        self.stream.flush()
        self._open_line = True

    def _end_line(self) -> None:
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def _ensure_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="elb-gate-status", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self._refresh):
            with self._lock:
                if self._event is not None and self._event.phase in _WAITING and self._open_line:
                    self._draw()
