"""The command line itself: flags, help, exit codes — no cluster needed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from client.cli import build_parser, exit_codes, main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
CODES = {
    "COORDINATION_ERROR": 69,
    "SUBMIT_SLOT_TIMEOUT": 75,
    "CAPACITY_TIMEOUT": 76,
    "CONFIG_ERROR": 78,
    "EXEC_TIMEOUT": 124,
}


def test_the_distinct_outcomes_have_distinct_exit_codes() -> None:
    values = [getattr(exit_codes, name) for name in CODES] + [
        exit_codes.OK,
        exit_codes.REFUSED,
        exit_codes.USAGE,
        exit_codes.CANNOT_EXECUTE,
        exit_codes.COMMAND_NOT_FOUND,
    ]
    assert len(set(values)) == len(values)
    assert {name: getattr(exit_codes, name) for name in CODES} == CODES


@pytest.mark.parametrize("code", sorted(CODES.values()))
def test_every_exit_code_is_in_help_and_in_the_docs(code: int) -> None:
    assert re.search(rf"^\s+{code}\s", exit_codes.help_text(), re.M)
    assert re.search(rf"\|\s*`?{code}`?\s*\|", DOCS.read_text())


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "blast", "--kubeconfig", "/k", "census"],
        ["census", "-n", "blast", "--kubeconfig", "/k"],
        ["--kubeconfig", "/k", "census", "--namespace", "blast"],
    ],
)
def test_global_flags_work_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.namespace, args.kubeconfig, args.context) == ("blast", "/k", None)


def test_lease_subcommands_accept_the_global_flags_too() -> None:
    args = build_parser().parse_args(["lease", "release", "--force", "-n", "ns1"])
    assert (args.namespace, args.force) == ("ns1", True)


def test_submit_without_a_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit"]) == exit_codes.USAGE
    assert "give the command after --" in capsys.readouterr().err


def test_a_bad_source_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--source", "Not_DNS", "--", "true"]) == exit_codes.USAGE
    assert "--source" in capsys.readouterr().err


def test_lease_release_without_force_explains_itself(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lease", "release"]) == exit_codes.USAGE
    assert "needs --force" in capsys.readouterr().err


def test_incoherent_settings_are_refused_naming_the_variables(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BLAST_SUBMIT_LEASE_TTL_SECONDS", "600")
    monkeypatch.setenv("ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS", "700")
    assert main(["submit", "--", "true"]) == exit_codes.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS (700)" in err
    assert "BLAST_SUBMIT_LEASE_TTL_SECONDS (600)" in err


def test_an_exec_timeout_flag_at_or_above_the_ttl_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BLAST_SUBMIT_LEASE_TTL_SECONDS", "600")
    assert main(["submit", "--exec-timeout", "600", "--", "true"]) == exit_codes.CONFIG_ERROR
    assert "must be > 0 and < BLAST_SUBMIT_LEASE_TTL_SECONDS (600)" in capsys.readouterr().err


def test_a_missing_kubeconfig_names_the_file_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = tmp_path / "nope.yaml"
    assert main(["--kubeconfig", str(missing), "census"]) == exit_codes.CONFIG_ERROR
    err = capsys.readouterr().err
    assert str(missing) in err and "--kubeconfig" in err


def test_the_module_entry_point_prints_help_with_the_exit_codes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "client", "submit", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert "-- COMMAND" in done.stdout and "exit codes:" in done.stdout
    assert "124" in done.stdout
