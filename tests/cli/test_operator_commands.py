"""`elb-gate census` and `elb-gate lease status|release --force` against the emulator,
and the errors an operator meets (no API, RBAC), run in-process for speed."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from elbgate.cli import exit_codes, main
from elbgate.lease import format_microtime
from tests.cli.conftest import LEASE, NS, SMALL, holder_of
from tests.client.conftest import complete, search_job
from tests.kube_emulator import Emulator


@pytest.fixture
def as_alice(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Emulator:
    for key, value in SMALL.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("KUBECONFIG", emulator.kubeconfig("alice"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return emulator


def put_lease(emu: Emulator, holder: str, renewed_ago: float, user: str = "") -> None:
    renewed = format_microtime(datetime.now(UTC) - timedelta(seconds=renewed_ago))
    annotations = {"elb-gate.io/holder-user": user} if user else {}
    emu.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": NS, "annotations": annotations},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed},
        }
    )


def test_census_json_shows_searches_ceiling_lease_and_verdict(
    as_alice: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    as_alice.create(search_job("s1", app="submit"))
    as_alice.create(search_job("s2"))
    as_alice.create(search_job("done"))
    complete(as_alice, "blast-done")
    put_lease(as_alice, "dashboard-" + "a" * 32, renewed_ago=1, user="dash")
    assert main(["census", "-o", "json"]) == exit_codes.OK
    report = json.loads(capsys.readouterr().out)
    assert report["namespace"] == NS and report["ceiling"] == 3 and report["active"] == 2
    assert [s["id"] for s in report["searches"]] == ["s1", "s2"]
    assert report["searches"][0]["jobs"] == ["submit/submit-s1"]
    assert report["lease"]["holder"] == "dashboard-" + "a" * 32
    assert report["lease"]["holderUser"] == "dash"
    assert "admitted only for the Lease holder dashboard-" in report["verdict"]


def test_census_table_at_the_ceiling_says_gate_b_would_deny(
    as_alice: Emulator, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLAST_MAX_RUN_CONCURRENCY", "1")
    as_alice.create(search_job("s1"))
    assert main(["census", "-n", NS]) == exit_codes.OK
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "namespace default: 1/1 active, 0 orphaned finalizer(s)"
    assert "Lease elb-blast-submit-default: does not exist" in out
    assert "denied by Gate B: 1/1 active (at ceiling)" in out
    assert "blast/blast-s1" in out


def test_lease_status_shows_holder_and_expiry(
    as_alice: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    put_lease(as_alice, "openapi-" + "c" * 32, renewed_ago=1, user="system:serviceaccount:x:y")
    assert main(["lease", "status"]) == exit_codes.OK
    out = capsys.readouterr().out
    assert out.startswith(
        f"Lease {LEASE}: held by openapi-{'c' * 32} (user system:serviceaccount:x:y) until "
    )
    assert main(["lease", "status", "-o", "json"]) == exit_codes.OK
    assert json.loads(capsys.readouterr().out)["state"] == "held"


def test_force_release_of_a_live_lease_is_refused_naming_holder_and_expiry(
    as_alice: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    put_lease(as_alice, "dashboard-" + "a" * 32, renewed_ago=1, user="dash")
    assert main(["lease", "release", "--force"]) == exit_codes.REFUSED
    err = capsys.readouterr().err
    assert f"refusing to release Lease {LEASE}: it is live, held by dashboard-" in err
    assert "(user dash) until 20" in err
    assert holder_of(as_alice) == "dashboard-" + "a" * 32


def test_force_release_reclaims_an_expired_lease_without_deleting_it(
    as_alice: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    put_lease(as_alice, "dashboard-" + "a" * 32, renewed_ago=60)
    assert main(["lease", "release", "--force"]) == exit_codes.OK
    assert "has expired; releasing it" in capsys.readouterr().err
    assert as_alice.get("leases", NS, LEASE)["spec"]["holderIdentity"] == ""


def test_force_release_of_a_free_lease_changes_nothing(
    as_alice: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    put_lease(as_alice, "", renewed_ago=60)
    version = as_alice.get("leases", NS, LEASE)["metadata"]["resourceVersion"]
    assert main(["lease", "release", "--force"]) == exit_codes.OK
    assert "already free" in capsys.readouterr().err
    assert as_alice.get("leases", NS, LEASE)["metadata"]["resourceVersion"] == version


def test_an_rbac_denial_names_rbac_and_what_to_grant(
    as_alice: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    as_alice.faults.add(method="GET", resource="jobs", status=403)
    assert main(["census"]) == exit_codes.COORDINATION_ERROR
    err = capsys.readouterr().err
    assert "list jobs in namespace 'default' is forbidden by RBAC (403)" in err
    assert "list on jobs.batch" in err


def test_an_unreachable_api_names_the_server_and_what_to_check(
    as_alice: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"https://127.0.0.1:{sock.getsockname()[1]}"
    config = yaml.safe_load(Path(as_alice.kubeconfig("alice")).read_text())
    config["clusters"][0]["cluster"]["server"] = dead
    broken = tmp_path / "kubeconfig"
    broken.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(broken))
    assert main(["lease", "status"]) == exit_codes.COORDINATION_ERROR
    err = capsys.readouterr().err
    assert f"the Kubernetes API at {dead} did not answer" in err
    assert "kubeconfig context points at it" in err


def test_census_tells_a_finalizer_merging_results_from_an_orphan(
    as_alice: Emulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Grace 0: every lone finalizer is past it. Only the one whose batch work never
    # appeared is an orphan; the one whose blast Job succeeded is merging results.
    monkeypatch.setenv("BLAST_FINALIZER_GRACE_SECONDS", "0")
    as_alice.create(search_job("merging", app="finalizer"))
    as_alice.create(search_job("merging"))
    complete(as_alice, "blast-merging")
    as_alice.create(search_job("lost", app="finalizer"))
    assert main(["census", "-o", "json"]) == exit_codes.OK
    report = json.loads(capsys.readouterr().out)
    assert [o["name"] for o in report["orphans"]] == ["finalizer-lost"]
    assert report["finishing"] == [{"name": "finalizer-merging", "id": "merging"}]
    assert report["active"] == 0
    assert main(["census"]) == exit_codes.OK
    table = capsys.readouterr().out
    assert "1 orphaned finalizer(s)" in table
    assert (
        "finishing (batch work done, merging; no slot, never collected): finalizer-merging" in table
    )
