"""The submit's state on stderr: plain lines off a terminal, one updating line on it."""

from __future__ import annotations

import io

import pytest

from client.cli.status_line import StatusLine, format_elapsed, format_event
from client.slot import SlotEvent
from client.slot_machine import Phase


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (7.9, "7s"), (750, "12m30s"), (3723, "1h2m3s"), (-1, "0s")]
)
def test_elapsed_time_is_written_in_the_one_duration_format(seconds: float, text: str) -> None:
    assert format_elapsed(seconds) == text


def test_a_waiting_state_shows_how_long_it_has_waited() -> None:
    event = SlotEvent(Phase.WAITING_FOR_CAPACITY, "3/3 active: a, b, c", 42)
    assert format_event(event) == "elb-gate: waiting_for_capacity (waited 42s): 3/3 active: a, b, c"


def test_a_non_waiting_state_shows_no_wait() -> None:
    assert format_event(SlotEvent(Phase.READY, "1/3 active", 3)) == "elb-gate: ready: 1/3 active"


def test_off_a_terminal_every_state_change_is_its_own_plain_line() -> None:
    out = io.StringIO()
    line = StatusLine(out, tty=False)
    line.update(SlotEvent(Phase.ACQUIRING, "", 0))
    line.update(SlotEvent(Phase.WAITING_FOR_SUBMIT_SLOT, "held by x", 5))
    line.note("elb-gate: running true")
    line.close()
    assert out.getvalue().splitlines() == [
        "elb-gate: acquiring",
        "elb-gate: waiting_for_submit_slot (waited 5s): held by x",
        "elb-gate: running true",
    ]
    assert "\r" not in out.getvalue()


def test_on_a_terminal_a_wait_redraws_one_line_and_a_note_starts_a_new_one() -> None:
    out = io.StringIO()
    clock = FakeClock()
    line = StatusLine(out, tty=True, monotonic=clock, refresh_seconds=3600)
    line.update(SlotEvent(Phase.WAITING_FOR_SUBMIT_SLOT, "held by x", 0))
    clock.now = 4
    line.update(SlotEvent(Phase.WAITING_FOR_SUBMIT_SLOT, "held by y", 4))
    line.note("elb-gate: running true")
    line.close()
    text = out.getvalue()
    assert text == (
        "\r\x1b[2Kelb-gate: waiting_for_submit_slot (waited 0s): held by x"
        "\r\x1b[2Kelb-gate: waiting_for_submit_slot (waited 4s): held by y"
        "\nelb-gate: running true\n"
    )
