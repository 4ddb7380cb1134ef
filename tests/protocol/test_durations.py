"""One duration format everywhere: Kubernetes' (Go's time.Duration) style."""

from __future__ import annotations

from datetime import timedelta

import pytest

from elbgate.durations import format_distance, format_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (7, "7s"),
        (7.9, "7s"),
        (59, "59s"),
        (60, "1m0s"),
        (250, "4m10s"),
        (900, "15m0s"),
        (928, "15m28s"),
        (3600, "1h0m0s"),
        (3723, "1h2m3s"),
        (49 * 3600, "49h0m0s"),
        (-5, "-5s"),
        (-925, "-15m25s"),
    ],
)
def test_durations_read_as_go_writes_them(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_a_timedelta_is_written_the_same_as_its_seconds() -> None:
    assert format_duration(timedelta(minutes=15, seconds=25)) == "15m25s"


@pytest.mark.parametrize(
    ("seconds", "text"), [(250, "in 4m10s"), (0, "in 0s"), (-250, "4m10s ago")]
)
def test_a_distance_says_which_side_of_now_it_lies(seconds: float, text: str) -> None:
    assert format_distance(seconds) == text


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_duration_that_is_not_finite_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="not a finite duration"):
        format_duration(bad)
