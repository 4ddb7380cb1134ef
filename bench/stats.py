"""Statistics over latency samples and over repeated runs. Pure; no I/O."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation between closest
    ranks (numpy's default), so p50 of an even count is the midpoint."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


@dataclass(frozen=True, slots=True)
class Latency:
    """Percentiles of one measured pass, in milliseconds."""

    count: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float


def latency(samples_ns: Sequence[int]) -> Latency:
    """Summarise per-request latencies measured with ``time.perf_counter_ns``."""
    ms = [s / 1e6 for s in samples_ns]
    if not ms:
        return Latency(0, math.nan, math.nan, math.nan, math.nan)
    return Latency(len(ms), percentile(ms, 50), percentile(ms, 99), statistics.fmean(ms), max(ms))


@dataclass(frozen=True, slots=True)
class Spread:
    """One figure over repeated runs: the median is reported, min..max is the noise."""

    median: float
    low: float
    high: float
    runs: int

    @property
    def relative(self) -> float:
        """(max - min) / median: how far repeated runs disagree (0 = perfectly)."""
        if not self.median or math.isnan(self.median):
            return math.nan
        return (self.high - self.low) / abs(self.median)


def spread(values: Sequence[float]) -> Spread:
    """Median and range of one figure over runs (NaNs ignored)."""
    kept = [v for v in values if not math.isnan(v)]
    if not kept:
        return Spread(math.nan, math.nan, math.nan, 0)
    return Spread(statistics.median(kept), min(kept), max(kept), len(kept))


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``; NaN when the baseline is zero or unknown."""
    if not baseline or math.isnan(baseline) or math.isnan(value):
        return math.nan
    return value / baseline


def per_second(count: int, seconds: float) -> float:
    """A rate; NaN for an empty interval."""
    return count / seconds if seconds > 0 else math.nan
