"""`elb-gate submit` as a real process against the real control plane with the
webhook: mutual exclusion, capacity waits, deadlines, signals and outages, each
with its documented exit code."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from client import SubmitLease
from client.cli import exit_codes
from elbgate.settings import Settings
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.cli.conftest import SMALL, Cli
from tests.client.conftest import complete, holder_of, job_name, search_job, sync_kube

FAST = ("--poll-interval", "0.1")


def other_holder(cp: ControlPlane, ns: str) -> SubmitLease:
    """The Lease taken by the dashboard's submit path (released by the caller, or not)."""
    kube = sync_kube(cp.kubeconfig("dashboard-lease"))
    lease = SubmitLease(ns, gate=Settings.from_env(SMALL).gate, source="dashboard", kube=kube)
    assert lease.acquire().acquired
    return lease


def test_two_racing_submits_never_run_their_commands_at_the_same_time(
    cli: Cli, control_plane: ControlPlane
) -> None:
    a = cli.start("submit", *FAST, "--", *cli.recorder("a", go="go-a"))
    b = cli.start("submit", *FAST, "--", *cli.recorder("b", go="go-b"))
    wait_until(lambda: len(cli.log_lines()) == 1, 60, "one COMMAND to start")
    first = cli.log_lines()[0].split()[1]
    second = "b" if first == "a" else "a"
    later = a if second == "a" else b
    later.wait_for_stderr("waiting_for_submit_slot")  # the other one is kept out...
    assert len(cli.log_lines()) == 1
    cli.release_go(f"go-{first}")  # ...until the first COMMAND ends
    wait_until(lambda: len(cli.log_lines()) == 3, 60, "the second COMMAND to start")
    cli.release_go(f"go-{second}")
    assert (a.wait(), b.wait()) == (0, 0)
    events = [line.split()[:2] for line in cli.log_lines()]
    assert events == [["start", first], ["end", first], ["start", second], ["end", second]]
    assert holder_of(control_plane, cli.ns) == ""


def test_command_exit_status_is_passed_through_and_the_lease_released(
    cli: Cli, control_plane: ControlPlane
) -> None:
    run = cli.run("submit", *FAST, "--", *cli.recorder("x"), EXIT_WITH="3")
    assert run.code == 3, run.stderr
    assert "elb-gate: running" in run.stderr and "elb-gate: released" in run.stderr
    assert holder_of(control_plane, cli.ns) == ""


def test_at_the_ceiling_submit_waits_for_capacity_and_proceeds_when_a_search_completes(
    control_plane: ControlPlane, hook: WebhookProcess, fresh_ns: str, tmp_path: Path
) -> None:
    s1 = search_job(fresh_ns, "s1")
    control_plane.admin.create(s1)  # running before the namespace was gated
    cli = Cli(control_plane, hook.install.gate(fresh_ns), tmp_path)
    run = cli.start("submit", *FAST, "--", *cli.recorder("x"), BLAST_MAX_RUN_CONCURRENCY="1")
    run.wait_for_stderr("waiting_for_capacity")
    assert "1/1 active: s1" in run.stderr
    assert cli.log_lines() == [] and holder_of(control_plane, cli.ns) == ""
    complete(control_plane, cli.ns, job_name(s1))
    assert run.wait() == 0, run.stderr
    assert [line.split()[0] for line in cli.log_lines()] == ["start", "end"]


def test_a_busy_lease_past_the_slot_deadline_exits_75(
    cli: Cli, control_plane: ControlPlane
) -> None:
    lease = other_holder(control_plane, cli.ns)
    try:
        run = cli.run(
            "submit", *FAST, "--", *cli.recorder("x"), BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS="1"
        )
        assert run.code == exit_codes.SUBMIT_SLOT_TIMEOUT == 75, run.stderr
        assert "waiting_for_submit_slot" in run.stderr
        assert "submit_slot_timeout: no submit slot within the wait limit" in run.stderr
        assert lease.holder in run.stderr
        assert cli.log_lines() == [] and holder_of(control_plane, cli.ns) == lease.holder
    finally:
        lease.close()


def test_a_full_namespace_past_the_capacity_deadline_exits_76(
    control_plane: ControlPlane, hook: WebhookProcess, fresh_ns: str, tmp_path: Path
) -> None:
    control_plane.admin.create(search_job(fresh_ns, "s1", app="submit"))
    cli = Cli(control_plane, hook.install.gate(fresh_ns), tmp_path)
    run = cli.run(
        "submit",
        *FAST,
        "--",
        *cli.recorder("x"),
        BLAST_MAX_RUN_CONCURRENCY="1",
        BLAST_CAPACITY_WAIT_MAX_SECONDS="1",
    )
    assert run.code == exit_codes.CAPACITY_TIMEOUT == 76, run.stderr
    assert "capacity_timeout" in run.stderr and "1/1 active: s1" in run.stderr
    assert cli.log_lines() == [] and holder_of(control_plane, cli.ns) == ""


def test_a_command_past_the_exec_timeout_is_stopped_and_exits_124(
    cli: Cli, control_plane: ControlPlane
) -> None:
    run = cli.run("submit", *FAST, "--exec-timeout", "1", "--", *cli.recorder("x", go="never"))
    assert run.code == exit_codes.EXEC_TIMEOUT == 124, run.stderr
    assert "exec timeout" in run.stderr
    assert [line.split()[0] for line in cli.log_lines()] == ["start"], "terminated, never ended"
    assert holder_of(control_plane, cli.ns) == ""


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_a_signal_during_command_terminates_the_child_and_releases_the_lease(
    cli: Cli, control_plane: ControlPlane, signum: signal.Signals, code: int
) -> None:
    run = cli.start("submit", *FAST, "--", *cli.recorder("x", go="never"))
    wait_until(lambda: len(cli.log_lines()) == 1, 60, "COMMAND to start")
    child_pid = int(cli.log_lines()[0].split()[2])
    assert holder_of(control_plane, cli.ns).startswith("cli-")
    run.proc.send_signal(signum)
    assert run.wait() == code == exit_codes.for_signal(signum), run.stderr
    assert holder_of(control_plane, cli.ns) == ""
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)
    assert f"stopped by {signum.name}" in run.stderr


def test_sigterm_while_waiting_exits_without_holding_the_lease(
    cli: Cli, control_plane: ControlPlane
) -> None:
    lease = other_holder(control_plane, cli.ns)
    try:
        run = cli.start("submit", *FAST, "--", *cli.recorder("x"))
        run.wait_for_stderr("waiting_for_submit_slot")
        run.proc.send_signal(signal.SIGTERM)
        assert run.wait() == 143, run.stderr
        assert holder_of(control_plane, cli.ns) == lease.holder and cli.log_lines() == []
    finally:
        lease.close()


@pytest.mark.parametrize(
    "fault",
    [{"status": 500}, {"status": 503}, {"status": None, "drop": True}],
    ids=["500", "503", "dropped"],
)
def test_an_api_outage_while_acquiring_exits_69_instead_of_waiting(
    cli: Cli, control_plane: ControlPlane, proxy: FaultProxy, fault: dict[str, object]
) -> None:
    proxy.add(method="GET", resource="leases", count=None, **fault)
    through_proxy = proxy.kubeconfig(control_plane.token("alice"), "alice")
    try:
        run = cli.run(
            "submit", "-n", cli.ns, *FAST, "--", *cli.recorder("x"), KUBECONFIG=through_proxy
        )
    finally:
        proxy.clear()
    assert run.code == exit_codes.COORDINATION_ERROR == 69, run.stderr
    assert "coordination_error" in run.stderr and "Not treated as busy" in run.stderr
    assert "waiting_for_submit_slot" not in run.stderr
    assert cli.log_lines() == []


def test_an_unknown_command_exits_127_and_releases(cli: Cli, control_plane: ControlPlane) -> None:
    run = cli.run("submit", *FAST, "--", "/nonexistent/elastic-blast", "submit")
    assert run.code == exit_codes.COMMAND_NOT_FOUND == 127
    assert "command not found: /nonexistent/elastic-blast" in run.stderr
    assert holder_of(control_plane, cli.ns) == ""


def test_the_source_flag_prefixes_the_holder_identity(
    cli: Cli, control_plane: ControlPlane
) -> None:
    run = cli.start("submit", *FAST, "--source", "openapi", "--", *cli.recorder("x", go="go"))
    wait_until(lambda: len(cli.log_lines()) == 1, 60, "COMMAND to start")
    holder = holder_of(control_plane, cli.ns)
    assert holder.startswith("openapi-") and len(holder) == len("openapi-") + 32
    assert f"as {holder}" in run.stderr
    cli.release_go("go")
    assert run.wait() == 0
