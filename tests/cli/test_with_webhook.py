"""`elb-gate submit` with the admission webhook registered on the real API
server: the CLI's Lease is stamped with its user, and a search Job is admitted
only for the Lease holder (kubectl prints what it prints on a cluster)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from testbed.controlplane import ControlPlane, kubectl_path
from testbed.waiting import wait_until
from tests.cli.conftest import Cli
from tests.client.conftest import holder_of, search_job

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


@pytest.mark.kubectl
def test_the_cli_lease_is_stamped_and_only_its_holder_may_open_a_search(
    cli: Cli, control_plane: ControlPlane, tmp_path: Path
) -> None:
    ns = cli.ns
    script, job_file = tmp_path / "submitter.py", tmp_path / "job.json"
    script.write_text(SUBMITTER)
    job_file.write_text(json.dumps(search_job(ns, "search-1", app="finalizer")))
    lease_out, result_out = tmp_path / "lease.json", tmp_path / "result.txt"
    run = cli.start(
        "submit", "--poll-interval", "0.1", "--",
        sys.executable, str(script), ns, str(lease_out), str(job_file), str(result_out),
        str(tmp_path / "go"),
        KUBECTL=str(kubectl_path()),
        KUBECACHEDIR=str(tmp_path / "kubectl-cache"),
    )  # fmt: skip
    wait_until(result_out.exists, 60, "COMMAND to create its finalizer Job")

    lease = json.loads(lease_out.read_text())
    holder = lease["spec"]["holderIdentity"]
    assert holder.startswith("cli-")
    assert lease["metadata"]["annotations"] == {"elb-gate.io/holder-user": "alice"}
    code, _, output = result_out.read_text().partition("\n")
    assert code == "0", output  # the holder's search is admitted
    assert output.strip() == "job.batch/elb-finalizer-search-1 created"
    assert control_plane.admin.find("jobs", ns, "elb-finalizer-search-1") is not None

    # Someone else, without the Lease, is refused by Gate A, naming the holder.
    denied = control_plane.kubectl(
        "bob", "-n", ns, "create", "-f", "-",
        input=json.dumps(search_job(ns, "search-2", app="finalizer")),
    )  # fmt: skip
    assert denied.returncode != 0
    assert 'admission webhook "search-admission.elb-gate.io" denied the request' in denied.stderr
    assert holder in denied.stderr

    (tmp_path / "go").write_text("go")
    assert run.wait() == 0, run.stderr
    assert holder_of(control_plane, ns) == ""

    # With the Lease released, not even the CLI's user may open a search.
    late = control_plane.kubectl(
        "alice", "-n", ns, "create", "-f", "-",
        input=json.dumps(search_job(ns, "search-3", app="finalizer")),
    )  # fmt: skip
    assert late.returncode != 0 and "denied the request" in late.stderr
