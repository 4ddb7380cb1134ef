"""The benchmark's CPU meter reads another process's CPU time finely enough for a quick
pass: a few milliseconds are measured, not rounded to the 10 ms clock tick of
/proc/<pid>/stat. (A quick pass of 20 requests on the reads floor used less than one tick,
and its CPU per admission read 0.)"""

from __future__ import annotations

import subprocess
import sys

from bench.processes import CpuMeter

_BURNER = r"""
import sys, threading, time

def burn(seconds):
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass

for line in sys.stdin:
    before = time.process_time()
    if line.strip() == "thread":  # in a thread that has exited when the meter stops
        t = threading.Thread(target=burn, args=(0.003,))
        t.start()
        t.join()
    else:
        burn(0.003)
    print(repr(time.process_time() - before), flush=True)
"""


def test_a_few_milliseconds_of_another_processs_cpu_are_measured() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        for how in ("main", "thread") * 4:
            meter = CpuMeter((child.pid,))
            meter.start()
            child.stdin.write(how + "\n")
            child.stdin.flush()
            burnt = float(child.stdout.readline())  # the child's own count, in between
            (used,), _ = meter.stop()
            assert burnt >= 0.003
            # The meter read before the burn began and after it ended: it saw all of it.
            assert used >= burnt, (how, used, burnt)
            assert used < 1.0, (how, used)  # and not some other process's time
    finally:
        child.stdin.close()
        child.wait(timeout=30)
