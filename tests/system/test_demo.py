"""``make run ARGS='--once --system-tier'``: the demo's story, unchanged, with elb-gate
installed as shipped (``helm install`` of the chart, the image ``make image`` builds)
on real kubelet nodes and the API server calling the webhook through the Service.

The demo starts its own control plane with real nodes (not this module's tier), so it
also shows it leaves nothing of its own behind: no process, no temporary file, and the
host as it found it. It lasts as long as the finalizer grace (300 s) its orphaned
finalizer has to outlive, plus the install."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.system_tier import host_snapshot
from tests.demo.test_run_once import REPO, RUN_DEADLINE_SECONDS, kill_all_using, wait_until_gone
from tests.system.test_host import differences

pytestmark = [pytest.mark.system, pytest.mark.timeout(RUN_DEADLINE_SECONDS + 180)]


def summary_value(output: str, key: str) -> str:
    match = re.search(rf"^\s+{re.escape(key)}:\s+(.*)$", output, re.MULTILINE)
    assert match, f"no {key!r} line in the summary:\n{output[-6000:]}"
    return match.group(1)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory short enough for the nodes' containerd sockets under it
    (a Unix socket path has at most 107 bytes; pytest's tmp_path is too deep)."""
    path = Path(tempfile.mkdtemp(prefix="elbd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_demo_plays_its_story_on_the_chart_installed_as_shipped(
    short_tmp: Path, host_before: dict[str, Any]
) -> None:
    tmp_path = short_tmp
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELB_GATE_", "BLAST_"))}
    env |= {"TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    for key in ("ELB_GATE_HELM", "ELB_GATE_IMAGE_ARCHIVE"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "testbed.demo", "--once", "--system-tier"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_DEADLINE_SECONDS,
            check=False,
        )
    finally:
        kill_all_using(tmp_path)
    out = done.stdout + done.stderr
    print(out)
    assert done.returncode == 0, out[-6000:]
    assert "Traceback" not in out, out[-6000:]
    held = re.fullmatch(r"(\d+) of (\d+) held", summary_value(out, "expectations"))
    assert held and held.group(1) == held.group(2), out[-3000:]
    # What ran is the chart's install, not host processes.
    assert re.search(r"setup\s+helm install elb-gate charts/elb-gate -n elb-system", out), out
    ready = re.findall(r"setup\s+(elb-gate-(webhook|controller)-\S+) on (aks-system-\d)", out)
    assert sorted(kind for _, kind, _ in ready) == ["controller"] * 2 + ["webhook"] * 2, ready
    assert len({node for _, kind, node in ready if kind == "webhook"}) == 2, ready
    assert re.search(r"through Service elb-system/elb-gate-webhook -> EndpointSlice 10\.250\.", out)
    assert "python -m webhook" not in out
    # The story's outcomes, as on the fast tier.
    assert summary_value(out, "searches run").startswith("10 of 10 (dashboard 5/5, openapi 5/5)")
    served = [
        int(n)
        for n in re.findall(r"answered (\d+) reviews", summary_value(out, "webhook replicas"))
    ]
    assert len(served) == 2 and all(n > 0 for n in served), served
    assert re.search(
        r"DENIED\s+mallory \(no Lease\): Error from server \(Forbidden\): error when creating "
        r'"STDIN": admission webhook "search-admission\.elb-gate\.io" denied the request: '
        r"Gate A: ",
        out,
    ), out[-6000:]
    # Nothing of its own is left: processes, temporary files, host changes.
    assert list(tmp_path.glob("elb-gate-demo-*")) == []
    wait_until_gone(tmp_path)
    assert differences(host_before, host_snapshot()) == {}
