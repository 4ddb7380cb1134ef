"""`elb-gate census` and `elb-gate lease status|release --force` against the real
control plane, and the errors an operator meets (no API, RBAC), run in-process
for speed. The Leases they report on are taken by the submit paths' own
identities, so the webhook stamps who holds them."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from client import SubmitLease
from client.cli import exit_codes, main
from elbgate.names import lease_name
from elbgate.settings import Settings
from testbed.controlplane import ControlPlane, PodIdentity
from testbed.webhook_process import WebhookProcess
from tests.cli.conftest import SMALL
from tests.client.conftest import (
    complete,
    holder_of,
    job_name,
    lease_of,
    search_job,
    short_settings,
    sync_kube,
    wait_until_expired,
)

SKEW = int(SMALL["BLAST_LEASE_CLOCK_SKEW_SECONDS"])


@pytest.fixture
def operator_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """The small settings, outside a pod."""
    for key, value in SMALL.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return monkeypatch


def as_user(cp: ControlPlane, env: pytest.MonkeyPatch, tmp: Path, ns: str, user: str) -> str:
    """Run the CLI as ``user`` with ``ns`` as the kubeconfig context's namespace."""
    path = cp.write_kubeconfig(tmp / f"{user}-{ns}.kubeconfig", user, cp.token(user), ns)
    env.setenv("KUBECONFIG", path)
    return path


@pytest.fixture
def as_alice(
    control_plane: ControlPlane, operator_env: pytest.MonkeyPatch, tmp_path: Path, ns: str
) -> str:
    """alice in this test's gated namespace; returns the namespace."""
    as_user(control_plane, operator_env, tmp_path, ns, "alice")
    return ns


@contextmanager
def take_lease(
    cp: ControlPlane, ns: str, source: str, *, user: str = "", pod: PodIdentity | None = None,
    settings: Settings | None = None,
) -> Iterator[SubmitLease]:  # fmt: skip
    """The Lease taken by a submit path (a token-file user or a pod); released after."""
    kube = sync_kube(pod.kubeconfig if pod is not None else cp.kubeconfig(user))
    held = SubmitLease(
        ns, gate=(settings or Settings.from_env(SMALL)).gate, source=source, kube=kube
    )
    assert held.acquire().acquired
    try:
        yield held
    finally:
        kube.close()


def seeded(cp: ControlPlane, hook: WebhookProcess, ns: str, *jobs: dict) -> str:
    """Searches running before the namespace was gated."""
    for job in jobs:
        cp.admin.create(job)
    return hook.install.gate(ns)


def test_census_json_shows_searches_ceiling_lease_and_verdict(
    control_plane: ControlPlane, hook: WebhookProcess, fresh_ns: str, tmp_path: Path,
    operator_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    done = search_job(fresh_ns, "done")
    ns = seeded(
        control_plane,
        hook,
        fresh_ns,
        search_job(fresh_ns, "s1", app="submit"),
        search_job(fresh_ns, "s2"),
        done,
    )
    complete(control_plane, ns, job_name(done))
    as_user(control_plane, operator_env, tmp_path, ns, "alice")
    with take_lease(control_plane, ns, "dashboard", user="dashboard-lease") as held:
        assert main(["census", "-o", "json"]) == exit_codes.OK
        report = json.loads(capsys.readouterr().out)
        assert report["namespace"] == ns and report["ceiling"] == 3 and report["active"] == 2
        assert [s["id"] for s in report["searches"]] == ["s1", "s2"]
        assert report["searches"][0]["jobs"] == ["submit/submit-jobs-s1"]
        assert report["lease"]["holder"] == held.holder
        assert report["lease"]["holderUser"] == "dashboard-lease"
        assert f"admitted only for the Lease holder {held.holder}" in report["verdict"]


def test_census_table_at_the_ceiling_says_gate_b_would_deny(
    control_plane: ControlPlane, hook: WebhookProcess, fresh_ns: str, tmp_path: Path,
    operator_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    operator_env.setenv("BLAST_MAX_RUN_CONCURRENCY", "1")
    ns = seeded(control_plane, hook, fresh_ns, search_job(fresh_ns, "s1"))
    as_user(control_plane, operator_env, tmp_path, "default", "alice")
    assert main(["census", "-n", ns]) == exit_codes.OK
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"namespace {ns}: 1/1 active, 0 orphaned finalizer(s)"
    assert f"Lease elb-blast-submit-{ns}: does not exist" in out
    assert "denied by Gate B: 1/1 active (at ceiling)" in out
    assert f"blast/{job_name(search_job(ns, 's1'))}" in out


def test_lease_status_shows_holder_its_pod_and_expiry(
    control_plane: ControlPlane, as_alice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The in-cluster submit path holds it from its Pod (a token bound to the Pod).
    pod = control_plane.pod_identity(as_alice, "elb-openapi")
    with take_lease(control_plane, as_alice, "openapi", pod=pod) as held:
        assert main(["lease", "status"]) == exit_codes.OK
        out = capsys.readouterr().out
        assert out.startswith(
            f"Lease {lease_name(as_alice)}: held by {held.holder} "
            f"(user {pod.username}, pod {as_alice}/{pod.pod}/{pod.pod_uid}) until "
        )
        assert main(["lease", "status", "-o", "json"]) == exit_codes.OK
        summary = json.loads(capsys.readouterr().out)
        assert (summary["state"], summary["holderPod"]) == ("held", pod.stamp)


def test_force_release_of_a_live_lease_is_refused_naming_holder_and_expiry(
    control_plane: ControlPlane, as_alice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with take_lease(control_plane, as_alice, "dashboard", user="dashboard-lease") as held:
        assert main(["lease", "release", "--force"]) == exit_codes.REFUSED
        err = capsys.readouterr().err
        assert (
            f"refusing to release Lease {lease_name(as_alice)}: it is live, held by {held.holder}"
            in err
        )
        assert "(user dashboard-lease) until 20" in err
        assert holder_of(control_plane, as_alice) == held.holder


def test_force_release_reclaims_an_expired_lease_without_deleting_it(
    control_plane: ControlPlane, as_alice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The dashboard's task died holding a short Lease; it expires, and alice (not
    # its holder) may clear it: the guard admits a release after expiry.
    with take_lease(
        control_plane, as_alice, "dashboard", user="dashboard-lease", settings=short_settings()
    ):
        wait_until_expired(control_plane, as_alice, SKEW)
        assert main(["lease", "release", "--force"]) == exit_codes.OK
        assert "has expired; releasing it" in capsys.readouterr().err
        stored = lease_of(control_plane, as_alice)
        assert stored is not None and stored["spec"]["holderIdentity"] == ""


def test_force_release_of_a_free_lease_changes_nothing(
    control_plane: ControlPlane, as_alice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with take_lease(control_plane, as_alice, "dashboard", user="dashboard-lease") as held:
        held.release()
    free = lease_of(control_plane, as_alice)
    assert free is not None
    assert main(["lease", "release", "--force"]) == exit_codes.OK
    assert "already free" in capsys.readouterr().err
    after = lease_of(control_plane, as_alice)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == free["metadata"]["resourceVersion"]


def test_an_rbac_denial_names_rbac_and_what_to_grant(
    control_plane: ControlPlane, operator_env: pytest.MonkeyPatch, tmp_path: Path,
    fresh_ns: str, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # alice has no role in this namespace: the API server's RBAC refuses the LIST.
    as_user(control_plane, operator_env, tmp_path, fresh_ns, "alice")
    assert main(["census"]) == exit_codes.COORDINATION_ERROR
    err = capsys.readouterr().err
    assert f"list jobs in namespace '{fresh_ns}' is forbidden by RBAC (403)" in err
    assert 'User "alice" cannot list resource "jobs" in API group "batch"' in err
    assert "list on jobs.batch" in err


def test_an_unreachable_api_names_the_server_and_what_to_check(
    control_plane: ControlPlane, as_alice: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], operator_env: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"https://127.0.0.1:{sock.getsockname()[1]}"
    config = yaml.safe_load(Path(control_plane.kubeconfig("alice")).read_text())
    config["clusters"][0]["cluster"]["server"] = dead
    broken = tmp_path / "kubeconfig"
    broken.write_text(yaml.safe_dump(config))
    operator_env.setenv("KUBECONFIG", str(broken))
    assert main(["lease", "status", "-n", as_alice]) == exit_codes.COORDINATION_ERROR
    err = capsys.readouterr().err
    assert f"the Kubernetes API at {dead} did not answer" in err
    assert "kubeconfig context points at it" in err


def test_census_tells_a_finalizer_merging_results_from_an_orphan(
    control_plane: ControlPlane, hook: WebhookProcess, fresh_ns: str, tmp_path: Path,
    operator_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # Grace 0: every lone finalizer is past it. Only the one whose batch work never
    # appeared is an orphan; the one whose blast Job succeeded is merging results.
    operator_env.setenv("BLAST_FINALIZER_GRACE_SECONDS", "0")
    merging_batch = search_job(fresh_ns, "merging")
    ns = seeded(
        control_plane,
        hook,
        fresh_ns,
        search_job(fresh_ns, "merging", app="finalizer"),
        merging_batch,
        search_job(fresh_ns, "lost", app="finalizer"),
    )
    complete(control_plane, ns, job_name(merging_batch))
    as_user(control_plane, operator_env, tmp_path, ns, "alice")
    assert main(["census", "-o", "json"]) == exit_codes.OK
    report = json.loads(capsys.readouterr().out)
    assert [o["name"] for o in report["orphans"]] == ["elb-finalizer-lost"]
    assert report["finishing"] == [{"name": "elb-finalizer-merging", "id": "merging"}]
    assert report["active"] == 0
    assert main(["census"]) == exit_codes.OK
    table = capsys.readouterr().out
    assert "1 orphaned finalizer(s)" in table
    assert (
        "finishing (batch work done, merging; no slot, never collected): elb-finalizer-merging"
        in table
    )
