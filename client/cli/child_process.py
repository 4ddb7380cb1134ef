"""Run COMMAND under an exec timeout, and stop it (whole process group) when
asked: SIGTERM/SIGINT first, SIGKILL after a grace period.

COMMAND runs in its own session so that terminal signals reach ``elb-gate`` only
and ``elb-gate`` decides the order: child first, then the Lease release.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from . import exit_codes

DEFAULT_KILL_GRACE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    returncode: int
    """COMMAND's exit status; 128 + N when it died of signal N."""
    timed_out: bool = False
    stopped_by: int | None = None
    """The signal ``elb-gate`` received and passed on, if any."""

    @property
    def exit_code(self) -> int:
        """What ``elb-gate submit`` exits with for this outcome."""
        if self.timed_out:
            return exit_codes.EXEC_TIMEOUT
        if self.stopped_by is not None:
            return exit_codes.for_signal(self.stopped_by)
        return self.returncode


def run_child(
    argv: Sequence[str],
    *,
    timeout: float,
    stop: threading.Event,
    stop_signal: Callable[[], int],
    env: Mapping[str, str] | None = None,
    kill_grace: float = DEFAULT_KILL_GRACE_SECONDS,
    poll_seconds: float = 0.2,
    monotonic: Callable[[], float] = time.monotonic,
) -> ChildOutcome:
    """Start ``argv`` and wait for it, at most ``timeout`` seconds, or until ``stop``
    is set (then pass ``stop_signal()`` on). Raises FileNotFoundError/PermissionError
    when it cannot start."""
    proc = subprocess.Popen(
        list(argv), env=dict(env) if env is not None else None, start_new_session=True
    )
    deadline = monotonic() + timeout
    try:
        while True:
            try:
                rc = proc.wait(timeout=min(poll_seconds, max(deadline - monotonic(), 0.01)))
                return ChildOutcome(_shell_code(rc))
            except subprocess.TimeoutExpired:
                pass
            if stop.is_set():
                signum = stop_signal()
                _terminate(proc, signum, kill_grace)
                return ChildOutcome(_shell_code(proc.returncode), stopped_by=signum)
            if monotonic() >= deadline:
                _terminate(proc, signal.SIGTERM, kill_grace)
                return ChildOutcome(_shell_code(proc.returncode), timed_out=True)
    except BaseException:
        _terminate(proc, signal.SIGTERM, kill_grace)
        raise


def _terminate(proc: subprocess.Popen[bytes], signum: int, grace: float) -> None:
    """Signal the child's process group, wait ``grace``, then SIGKILL it."""
    if proc.poll() is not None:
        return
    _signal_group(proc, signum)
    try:
        proc.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)  # the child leads its own session, so pgid == pid
    except ProcessLookupError:
        pass


def _shell_code(rc: int) -> int:
    return exit_codes.for_signal(-rc) if rc < 0 else rc
