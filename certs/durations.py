"""Durations as operators write them: ``30d``, ``720h``, ``1d12h``, ``90m``, ``45s``."""

from __future__ import annotations

import datetime as dt
import re

_PART = re.compile(r"(\d+)([dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(text: str) -> dt.timedelta:
    """Parse a sum of ``<n><unit>`` parts (units d, h, m, s); raise ``ValueError``."""
    raw = text.strip().lower()
    parts = _PART.findall(raw)
    if not raw or "".join(n + u for n, u in parts) != raw:
        raise ValueError(f"{text!r} is not a duration like 30d, 720h, 1d12h or 90m")
    total = dt.timedelta()
    for number, unit in parts:
        total += dt.timedelta(**{_UNITS[unit]: int(number)})
    return total


def format_remaining(delta: dt.timedelta) -> str:
    """``"in 29d 23h"`` or ``"EXPIRED 2d 1h ago"``: what ``status`` prints."""
    seconds = int(delta.total_seconds())
    sign, seconds = ("in ", seconds) if seconds >= 0 else ("EXPIRED ", -seconds)
    days, rest = divmod(seconds, 86400)
    hours = rest // 3600
    return f"{sign}{days}d {hours}h" + (" ago" if sign == "EXPIRED " else "")
