"""The live timeline: one line per event, stamped with seconds since the demo began."""

from __future__ import annotations

import threading
import time

KIND_WIDTH = 9


class Timeline:
    """Thread-safe: the observer (emulator thread), submitters and the scenario all
    write here, and each line is printed whole."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        """Seconds since the timeline started."""
        return time.monotonic() - self.start

    def emit(self, kind: str, text: str) -> None:
        """Print ``text`` as a ``kind`` event, stamped now."""
        self.say(f"{self.elapsed():6.1f}s  {kind:<{KIND_WIDTH}} {text}")

    def say(self, text: str = "") -> None:
        """Print a line that is not an event (headings, the summary)."""
        with self._lock:
            print(text, flush=True)
