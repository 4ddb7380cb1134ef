"""What a user sees when the input is wrong: one line that says what to fix and
the exit code docs/cli.md gives it — never a traceback, never a verdict about
a namespace that does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from elbgate.cli import exit_codes, main
from tests.cli.canned_api import CannedApi, job_list, namespace, not_found, serving

NS_URL = "/api/v1/namespaces/{}"
JOBS_URL = "/apis/batch/v1/namespaces/{}/jobs"
LEASE_URL = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/elb-blast-submit-{ns}"

BROKEN_KUBECONFIGS = [
    pytest.param(
        "apiVersion: v1\nclusters: [\n  - {name: a\n",
        "not valid YAML at line 3, column 3",
        id="an-unclosed-flow-sequence",
    ),
    pytest.param("\tcurrent-context: x\n", "not valid YAML at line 1, column 1", id="a-tab"),
    pytest.param("just some text\n", "the document is a YAML string", id="a-string"),
    pytest.param("- a\n- b\n", "the document is a YAML list", id="a-list"),
    pytest.param("", "file is empty", id="an-empty-file"),
]


@pytest.fixture(autouse=True)
def _outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)


@pytest.mark.parametrize(("text", "says"), BROKEN_KUBECONFIGS)
@pytest.mark.parametrize("command", [["census"], ["lease", "status"], ["submit", "--", "true"]])
def test_a_kubeconfig_that_is_not_a_kubeconfig_is_one_line_and_exit_78(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    says: str,
    command: list[str],
) -> None:
    broken = tmp_path / "config"
    broken.write_text(text)
    assert main(["--kubeconfig", str(broken), *command]) == exit_codes.CONFIG_ERROR
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    assert line.startswith(f"elb-gate: error: cannot load kubeconfig {broken}: ")
    assert says in line and line.endswith("set KUBECONFIG or --kubeconfig")
    assert "Traceback" not in out.err and out.out == ""


@pytest.mark.parametrize(
    "command",
    [["census"], ["census", "-o", "json"], ["lease", "status"], ["lease", "release", "--force"]],
)
def test_a_namespace_that_does_not_exist_is_an_error_not_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    api = CannedApi(
        {
            NS_URL.format("nosuchns"): not_found("namespaces", "nosuchns"),
            # What a missing namespace looks like to the reads themselves: nothing at all.
            JOBS_URL.format("nosuchns"): (200, job_list([])),
        }
    )
    with serving(api, tmp_path) as kubeconfig:
        code = main(["--kubeconfig", str(kubeconfig), *command, "-n", "nosuchns"])
    out = capsys.readouterr()
    assert code == exit_codes.NO_SUCH_NAMESPACE == 66
    (line,) = out.err.splitlines()
    assert line.startswith('elb-gate: error: namespace "nosuchns" not found on http://127.0.0.1:')
    assert "check -n/--namespace" in line
    assert out.out == ""
    assert api.requests == [NS_URL.format("nosuchns")], "nothing else is read"


def test_an_identity_that_may_not_read_namespaces_still_gets_its_census(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forbidden = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'namespaces "blast" is forbidden: User "alice" cannot get resource '
        '"namespaces" in API group "" in the namespace "blast"',
        "reason": "Forbidden",
        "details": {"name": "blast", "kind": "namespaces"},
        "code": 403,
    }
    api = CannedApi(
        {
            NS_URL.format("blast"): (403, forbidden),
            JOBS_URL.format("blast"): (200, job_list([])),
            LEASE_URL.format(ns="blast"): not_found(
                "leases.coordination.k8s.io", "elb-blast-submit-blast"
            ),
        }
    )
    with serving(api, tmp_path) as kubeconfig:
        code = main(["--kubeconfig", str(kubeconfig), "census", "-n", "blast"])
    out = capsys.readouterr()
    assert code == exit_codes.OK, out.err
    assert out.out.startswith("namespace blast: 0/3 active")


def test_an_existing_namespace_is_checked_once_and_then_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = CannedApi(
        {
            NS_URL.format("blast"): (200, namespace("blast")),
            JOBS_URL.format("blast"): (200, job_list([])),
        }
    )
    with serving(api, tmp_path) as kubeconfig:
        code = main(["--kubeconfig", str(kubeconfig), "lease", "status", "-n", "blast"])
    out = capsys.readouterr()
    assert code == exit_codes.OK, out.err
    assert out.out.strip() == (
        "Lease elb-blast-submit-blast: does not exist (created by the first submit)"
    )
    assert api.requests == [NS_URL.format("blast"), LEASE_URL.format(ns="blast")]
