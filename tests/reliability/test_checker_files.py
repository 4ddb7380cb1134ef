"""The linearizability checker's binary is built per process and goes with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_checker_binary_goes_with_the_process_that_built_it() -> None:
    code = "from testbed.reliability.histories import checker; print(checker())"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, done.stderr
    binary = Path(done.stdout.strip())
    assert binary.name == "lincheck"  # it was built, where the process said
    assert not binary.parent.exists()
