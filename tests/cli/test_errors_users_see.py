"""What a user sees when the input is wrong: one line that says what to fix and
the exit code docs/cli.md gives it — never a traceback, never a verdict about
a namespace that does not exist. The answers are the real API server's, read
through the fault proxy so a test can tell what the CLI asked for."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from client.cli import exit_codes, main
from testbed.api import ApiError
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy

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


def asked(proxy: FaultProxy, before: Counter[tuple[str, str]]) -> list[tuple[str, str]]:
    """What went to the API server since ``before`` (method, resource), sorted."""
    return sorted((proxy.forwarded - before).elements())


@pytest.mark.parametrize(
    "command",
    [["census"], ["census", "-o", "json"], ["lease", "status"], ["lease", "release", "--force"]],
)
def test_a_namespace_that_does_not_exist_is_an_error_not_a_verdict(
    control_plane: ControlPlane, proxy: FaultProxy, capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:  # fmt: skip
    # An operator who may read namespaces (here the cluster admin) is told it is missing.
    kubeconfig = proxy.kubeconfig(control_plane.token("admin"), "admin")
    before = proxy.forwarded.copy()
    code = main(["--kubeconfig", kubeconfig, *command, "-n", "nosuchns"])
    out = capsys.readouterr()
    assert code == exit_codes.NO_SUCH_NAMESPACE == 66
    (line,) = out.err.splitlines()
    assert line == (
        f'elb-gate: error: namespace "nosuchns" not found on {proxy.url}; '
        "check -n/--namespace and the kubeconfig context"
    )
    assert out.out == ""
    assert asked(proxy, before) == [("GET", "namespaces")], "nothing else is read"


def test_a_namespace_that_does_not_exist_is_a_403_to_a_user_without_rights_there(
    control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    # RBAC is decided before the object is looked up: to alice, who may read
    # nothing in it, a missing namespace is "forbidden", not "not found". The
    # line must not send her to ask for a RoleBinding in a namespace that is not there.
    code = main(["--kubeconfig", control_plane.kubeconfig("alice"), "census", "-n", "nosuchns"])
    out = capsys.readouterr()
    assert code == exit_codes.COORDINATION_ERROR
    (line,) = out.err.splitlines()
    assert "list jobs in namespace 'nosuchns' is forbidden by RBAC (403)" in line
    assert "also when namespace 'nosuchns' does not exist: check -n/--namespace" in line
    assert out.out == ""


def test_an_identity_that_may_not_read_namespaces_still_gets_its_census(
    control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    # A submitter's Role (Leases, Jobs) bound in one namespace; no rights on namespaces.
    ns = control_plane.new_namespace("no-ns-read")
    user = control_plane.plain_user()
    control_plane.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "submitter", "namespace": ns},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                },
                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
            ],
        }
    )
    control_plane.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "submitter", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "submitter",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )
    with pytest.raises(ApiError) as denied:
        control_plane.api(user).request("GET", f"/api/v1/namespaces/{ns}")
    assert denied.value.status == 403
    code = main(["--kubeconfig", control_plane.kubeconfig(user), "census", "-n", ns])
    out = capsys.readouterr()
    assert code == exit_codes.OK, out.err
    assert out.out.startswith(f"namespace {ns}: 0/3 active")


def test_an_existing_namespace_is_checked_once_and_then_read(
    control_plane: ControlPlane, proxy: FaultProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    ns = control_plane.new_namespace("checked")
    kubeconfig = proxy.kubeconfig(control_plane.token("admin"), "admin")
    before = proxy.forwarded.copy()
    code = main(["--kubeconfig", kubeconfig, "lease", "status", "-n", ns])
    out = capsys.readouterr()
    assert code == exit_codes.OK, out.err
    assert out.out.strip() == (
        f"Lease elb-blast-submit-{ns}: does not exist (created by the first submit)"
    )
    assert asked(proxy, before) == [("GET", "leases"), ("GET", "namespaces")]
