"""The real kubectl (v1.32) against the emulator prints what it prints against a real cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl

pytestmark = pytest.mark.kubectl


def lease_yaml(name: str, holder: str = "a", rv: str | None = None,
               namespace: str | None = None) -> str:
    meta = f"  name: {name}\n"
    if rv:
        meta += f'  resourceVersion: "{rv}"\n'
    if namespace:
        meta += f"  namespace: {namespace}\n"
    return (f"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n{meta}"
            f"spec:\n  holderIdentity: {holder}\n  leaseDurationSeconds: 900\n")


def test_replace_with_a_stale_resource_version_prints_the_conflict(
        emu: Emulator, tmp_path: Path) -> None:
    path = tmp_path / "lease.yaml"
    path.write_text(lease_yaml("stale"))
    assert kubectl(emu, "alice", "create", "-f", str(path)).returncode == 0
    rv = emu.get("leases", "default", "stale")["metadata"]["resourceVersion"]
    emu.patch("leases", "default", "stale", lambda o: o["spec"].update(holderIdentity="b"))
    path.write_text(lease_yaml("stale", "c", rv))
    result = kubectl(emu, "alice", "replace", "-f", str(path))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f'Error from server (Conflict): error when replacing "{path}": Operation cannot be '
        'fulfilled on leases.coordination.k8s.io "stale": the object has been modified; '
        "please apply your changes to the latest version and try again")


def test_creating_twice_prints_already_exists(emu: Emulator) -> None:
    assert kubectl(emu, "alice", "create", "-f", "-", input=lease_yaml("twice")).returncode == 0
    result = kubectl(emu, "alice", "create", "-f", "-", input=lease_yaml("twice"))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'Error from server (AlreadyExists): error when creating "STDIN": '
        'leases.coordination.k8s.io "twice" already exists')


def test_getting_a_missing_lease_prints_not_found(emu: Emulator) -> None:
    result = kubectl(emu, "alice", "get", "lease", "ghost")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'Error from server (NotFound): leases.coordination.k8s.io "ghost" not found')


def test_ignore_not_found_prints_nothing_for_a_missing_lease(emu: Emulator) -> None:
    result = kubectl(emu, "alice", "get", "lease", "ghost", "--ignore-not-found", "-o", "json")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_the_submit_path_round_trip_create_get_replace_works(emu: Emulator) -> None:
    assert kubectl(emu, "openapi", "create", "-f", "-",
                   input=lease_yaml("elb-blast-submit-default")).returncode == 0
    got = json.loads(kubectl(emu, "openapi", "get", "lease", "elb-blast-submit-default",
                             "--ignore-not-found", "-o", "json").stdout)
    assert got["kind"] == "Lease" and got["spec"]["holderIdentity"] == "a"
    got["spec"]["holderIdentity"] = ""
    result = kubectl(emu, "openapi", "replace", "-f", "-", "-o", "json",
                     input=json.dumps(got))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["spec"]["holderIdentity"] == ""


def test_apply_label_patch_and_delete_work_without_extra_flags(emu: Emulator) -> None:
    applied = kubectl(emu, "alice", "apply", "-f", "-", input=lease_yaml("applied"))
    assert applied.stdout.strip() == "lease.coordination.k8s.io/applied created"
    again = kubectl(emu, "alice", "apply", "-f", "-", input=lease_yaml("applied", "b"))
    assert again.stdout.strip() == "lease.coordination.k8s.io/applied configured"
    assert kubectl(emu, "alice", "label", "lease", "applied", "app=x").returncode == 0
    assert kubectl(emu, "alice", "patch", "lease", "applied", "--type=merge",
                   "-p", '{"spec":{"leaseDurationSeconds":60}}').returncode == 0
    lease = emu.get("leases", "default", "applied")
    assert lease["spec"] == {"holderIdentity": "b", "leaseDurationSeconds": 60}
    assert lease["metadata"]["labels"] == {"app": "x"}
    listed = kubectl(emu, "alice", "get", "leases", "-l", "app=x", "-o", "name")
    assert listed.stdout.strip() == "lease.coordination.k8s.io/applied"
    deleted = kubectl(emu, "alice", "delete", "lease", "applied")
    assert deleted.stdout.strip() == 'lease.coordination.k8s.io "applied" deleted'
    assert emu.find("leases", "default", "applied") is None


def test_create_in_a_missing_namespace_prints_namespace_not_found(emu: Emulator) -> None:
    result = kubectl(emu, "alice", "create", "-f", "-",
                     input=lease_yaml("x", namespace="nowhere"))
    assert result.stderr.strip() == (
        'Error from server (NotFound): error when creating "STDIN": '
        'namespaces "nowhere" not found')


def test_an_unknown_token_prints_you_must_be_logged_in(emu: Emulator, tmp_path: Path) -> None:
    config = Path(emu.kubeconfig("alice")).read_text().replace(emu.token("alice"), "bogus")
    (tmp_path / "kubeconfig").write_text(config)
    result = kubectl(emu, "alice", "--kubeconfig", str(tmp_path / "kubeconfig"),
                     "get", "leases")
    assert "error: You must be logged in to the server (Unauthorized)" in result.stderr


def test_typed_create_subcommands_sending_protobuf_are_understood(emu: Emulator) -> None:
    assert kubectl(emu, "alice", "create", "namespace", "elb-system").returncode == 0
    result = kubectl(emu, "alice", "create", "configmap", "settings", "-n", "elb-system",
                     "--from-literal=BLAST_MAX_RUN_CONCURRENCY=3")
    assert result.returncode == 0, result.stderr
    stored = emu.get("configmaps", "elb-system", "settings")
    assert stored["data"] == {"BLAST_MAX_RUN_CONCURRENCY": "3"}
    assert emu.get("namespaces", None, "elb-system")["status"] == {"phase": "Active"}
