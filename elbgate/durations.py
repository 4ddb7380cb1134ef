"""How elb-gate writes time for people, in one module.

A duration in Kubernetes' (Go's ``time.Duration``) style, ``7s``, ``4m10s``,
``15m0s``, ``1h2m3s``, ``26h0m0s``; a distance from now (``in 4m10s``, ``4m10s
ago``); a moment with its distance (``2026-01-02T03:04:05Z (in 4m10s)``). The
API's own MicroTime format is :func:`elbgate.lease.format_microtime`.

Denials, the CLI, Events and logs all write durations through
:func:`format_duration`, so an operator reads the same shape everywhere and can
paste it into anything that parses Go durations (``kubectl wait --timeout``,
``cmctl``, Prometheus ``for:`` takes the same units). Whole seconds only: every
duration elb-gate reports (Lease expiry, ages, waits, graces) is judged in
seconds, and ``928.374s`` would only add noise.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta


def format_duration(value: float | timedelta) -> str:
    """``15m0s`` for 900 seconds; whole seconds (a fraction is dropped, as
    ``kubectl`` does for ages), ``-`` before a negative one.

    Go writes hours without a day unit (``49h0m0s``), minutes and seconds always
    once a larger unit is present (``1h0m0s``), and ``0s`` for zero; so does this.
    """
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    total = int(seconds)
    sign = "-" if total < 0 else ""
    hours, rest = divmod(abs(total), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def format_distance(seconds: float) -> str:
    """``in 4m10s`` for a moment ahead, ``4m10s ago`` for one behind."""
    return f"in {format_duration(seconds)}" if seconds >= 0 else f"{format_duration(-seconds)} ago"


def format_moment(moment: datetime, now: datetime) -> str:
    """``2026-01-02T03:04:05Z (in 4m10s)``: a moment in UTC to the second, and its
    distance from ``now``."""
    stamp = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{stamp} ({format_distance((moment - now).total_seconds())})"


__all__ = ["format_distance", "format_duration", "format_moment"]
