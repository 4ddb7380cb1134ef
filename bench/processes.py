"""CPU accounting and pinning of other processes, through /proc and sched_setaffinity."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_FIRST_AFFINITY = frozenset(os.sched_getaffinity(0))
"""The CPUs this process could run on before the benchmark pinned anything."""


def _process_cpu_clock(pid: int) -> int:
    """The clock id of ``pid``'s process-wide CPU clock, as glibc's ``clock_getcpuclockid``
    makes it on Linux (``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``)."""
    return ((~pid) << 3) | 2


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` (all its threads, those that have exited included), in seconds.

    Read from the process's CPU clock, in nanoseconds: a pass of a few dozen requests uses
    a few milliseconds of CPU, which /proc/<pid>/stat's utime + stime (clock ticks, 10 ms
    each) would round to nothing. /proc is the fallback where that clock cannot be read.
    """
    try:
        return time.clock_gettime_ns(_process_cpu_clock(pid)) / 1e9
    except OSError:
        raw = Path(f"/proc/{pid}/stat").read_text()
        # The command name (field 2) may hold spaces and parentheses: split after the last ")".
        fields = raw[raw.rindex(")") + 2 :].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
        return (utime + stime) / _TICKS


def resident_bytes(pid: int) -> int:
    """VmRSS of ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def can_pin(cpus: set[int]) -> bool:
    """True when every CPU in ``cpus`` is available to this process."""
    try:
        return cpus <= os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return False


def pin(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` (0 = this process) to ``cpus``. Threads started
    later inherit the mask of the thread that starts them."""
    real = os.getpid() if pid == 0 else pid
    for task in Path(f"/proc/{real}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, OSError):
            pass  # a thread that exited in between


def unpinned() -> None:
    """A ``preexec_fn``: the child runs on every CPU the benchmark started with, not on
    the load generator's. Submitters and their kubectl stand for users' processes, which
    run on machines and pods of their own in a cluster, not beside the control plane."""
    os.sched_setaffinity(0, _FIRST_AFFINITY)


@dataclass
class CpuMeter:
    """CPU time of a set of processes over an interval: ``start()``, then ``stop()``."""

    pids: tuple[int, ...]
    _start: tuple[float, ...] = ()
    _wall: float = 0.0

    def start(self) -> None:
        self._start = tuple(cpu_seconds(p) for p in self.pids)
        self._wall = time.perf_counter()

    def stop(self) -> tuple[tuple[float, ...], float]:
        """CPU seconds used by each pid since ``start()``, and the wall seconds."""
        wall = time.perf_counter() - self._wall
        used = tuple(cpu_seconds(p) - s for p, s in zip(self.pids, self._start, strict=True))
        return used, wall
