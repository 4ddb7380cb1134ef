"""The reliability suite's summary: one table of promises at the end of the session."""

from __future__ import annotations

from typing import Any

from testbed.reliability.ledger import LEDGER


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    """Print what each promise was proved with (runs, faults, violations)."""
    if not LEDGER.rows:
        return
    terminalreporter.section("elb-gate reliability and security summary")
    for line in LEDGER.table().splitlines():
        terminalreporter.write_line(line)
