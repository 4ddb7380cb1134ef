"""`elb-gate submit` with the real admission webhook registered: the CLI's Lease is
stamped with its user, and a search Job is admitted only for the Lease holder."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Cli, wait_until
from tests.client.conftest import search_job
from tests.kube_emulator import Emulator, User
from tests.kube_emulator.fixtures import kubectl
from tests.support.webhook_process import WebhookProcess

SUBMITTER = """\
import os, subprocess, sys, time
ns, lease_out, job_file, result_out, go = sys.argv[1:6]
kubectl = os.environ["KUBECTL"]
lease = subprocess.run([kubectl, "get", "lease", "elb-blast-submit-" + ns, "-n", ns, "-o", "json"],
                       capture_output=True, text=True)
open(lease_out, "w").write(lease.stdout)
made = subprocess.run([kubectl, "create", "-f", job_file], capture_output=True, text=True)
open(result_out, "w").write(f"{made.returncode}\\n{made.stdout}{made.stderr}")
end = time.monotonic() + 120
while not os.path.exists(go) and time.monotonic() < end:
    time.sleep(0.02)
"""
"""COMMAND standing in for `elastic-blast submit`: reads the Lease, creates the
search's finalizer Job with kubectl (as the CLI's own user), then holds."""


def finalizer(namespace: str, job_id: str) -> dict[str, Any]:
    job = search_job(job_id, app="finalizer")
    job["metadata"]["namespace"] = namespace
    return job


@pytest.mark.kubectl
def test_the_cli_lease_is_stamped_and_only_its_holder_may_open_a_search(
    cli: Cli, emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_user(User.plain("bob"))
    with WebhookProcess(emulator) as hook:
        ns = hook.gate_namespace("gated-cli")
        script, job_file = tmp_path / "submitter.py", tmp_path / "job.json"
        script.write_text(SUBMITTER)
        job_file.write_text(json.dumps(finalizer(ns, "search-1")))
        lease_out, result_out = tmp_path / "lease.json", tmp_path / "result.txt"
        run = cli.start(
            "submit", "-n", ns, "--poll-interval", "0.1", "--",
            sys.executable, str(script), ns, str(lease_out), str(job_file), str(result_out),
            str(tmp_path / "go"),
            KUBECTL=shutil.which("kubectl") or "kubectl",
            KUBECACHEDIR=str(emulator.state_dir / "kubectl-cache"),
        )  # fmt: skip
        wait_until(result_out.exists, "COMMAND to create its finalizer Job")

        lease = json.loads(lease_out.read_text())
        holder = lease["spec"]["holderIdentity"]
        assert holder.startswith("cli-")
        assert lease["metadata"]["annotations"]["elb-gate.io/holder-user"] == "alice"
        code, _, output = result_out.read_text().partition("\n")
        assert code == "0", output  # the holder's search is admitted
        assert emulator.find("jobs", ns, "finalizer-search-1") is not None

        # Someone else, without the Lease, is refused by Gate A, naming the holder.
        denied = kubectl(emulator, "bob", "create", "-f", "-",
                         input=json.dumps(finalizer(ns, "search-2")))  # fmt: skip
        assert denied.returncode != 0
        assert "denied the request" in denied.stderr and holder in denied.stderr

        (tmp_path / "go").write_text("go")
        assert run.wait() == 0, run.stderr
        assert emulator.get("leases", ns, f"elb-blast-submit-{ns}")["spec"]["holderIdentity"] == ""

        # With the Lease released, not even the CLI's user may open a search.
        late = kubectl(emulator, "alice", "create", "-f", "-",
                       input=json.dumps(finalizer(ns, "search-3")))  # fmt: skip
        assert late.returncode != 0 and "denied the request" in late.stderr
