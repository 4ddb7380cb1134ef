"""``make run ARGS=--once`` as a newcomer runs it: ``python -m testbed.demo --once`` in a
subprocess, judged by its summary, its exit status and what it leaves behind.

The demo plays on the session's control plane (``ELB_GATE_CONTROL_PLANE``), in a namespace
of its own, with every elb-gate setting at its default: it lasts as long as the finalizer
grace (300 s) that its orphaned finalizer has to outlive."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.component import host_env
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
RUN_DEADLINE_SECONDS = 1500
"""Generous: the story takes about six minutes, more on a busy shared machine."""

pytestmark = pytest.mark.timeout(RUN_DEADLINE_SECONDS + 120)


@dataclass(frozen=True)
class Run:
    code: int
    output: str
    tmp: Path


def demo_env(tmp: Path, cp: ControlPlane) -> dict[str, str]:
    """The caller's environment with temporary files under ``tmp`` (to check cleanup),
    attached to the session's control plane."""
    return {
        **host_env(),
        "TMPDIR": str(tmp),
        "PYTHONUNBUFFERED": "1",
        "ELB_GATE_CONTROL_PLANE": str(cp.state_dir),
    }


def processes_using(path: Path) -> list[int]:
    """Pids of live processes whose environment mentions ``path`` (the demo's children
    all carry it: TMPDIR, KUBECONFIG, certificate paths)."""
    needle = str(path).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return pids


def kill_all_using(path: Path) -> None:
    """SIGKILL every process still using ``path``: a demo that failed must not leave its
    controllers renewing the leader Lease, or its webhooks registered, on the control
    plane the rest of the session shares."""
    for pid in processes_using(path):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def described(pids: list[int]) -> str:
    """``pid: command line`` of each process, for a failure message."""
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "(gone)"
        out.append(f"{pid}: {cmd.strip()[:200]}")
    return "\n".join(out)


def wait_until_gone(path: Path, deadline: float = 60.0) -> None:
    """Wait for every process using ``path`` to exit; fail naming those still alive."""
    wait_until(
        lambda: not processes_using(path),
        deadline,
        f"every process using {path} to exit",
        interval=0.2,
        detail=lambda: f"still running: {processes_using(path)}",
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, control_plane: ControlPlane) -> Run:
    tmp = tmp_path_factory.mktemp("demo-once")
    done = subprocess.run(
        [sys.executable, "-m", "testbed.demo", "--once", "--dashboard", str(tmp / "dashboard.png")],
        cwd=REPO,
        env=demo_env(tmp, control_plane),
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_SECONDS,
        check=False,
    )
    return Run(done.returncode, done.stdout + done.stderr, tmp)


def summary_value(run: Run, key: str) -> str:
    match = re.search(rf"^\s+{re.escape(key)}:\s+(.*)$", run.output, re.MULTILINE)
    assert match, f"no {key!r} line in the summary:\n{run.output[-6000:]}"
    return match.group(1)


def test_the_dashboard_is_drawn_from_what_prometheus_scraped_during_the_run(run: Run) -> None:
    """``--dashboard`` (``make dashboard-png``): a real Prometheus scraped both replicas
    and the controller, and every panel's query ran (a failed one fails the run)."""
    line = summary_value(run, "dashboard")
    assert re.fullmatch(
        rf"{re.escape(str(run.tmp / 'dashboard.png'))} \(15 panels over [\d.]+ min\)", line
    )
    assert (run.tmp / "dashboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[FAILED]" not in run.output


def test_the_demo_exits_0_with_every_expectation_held(run: Run) -> None:
    assert run.code == 0, run.output[-6000:]
    assert "Traceback" not in run.output, run.output[-6000:]
    held = re.fullmatch(r"(\d+) of (\d+) held", summary_value(run, "expectations"))
    assert held and held.group(1) == held.group(2), run.output[-3000:]
    assert "[FAILED]" not in run.output


def test_all_ten_searches_ran_through_both_submit_paths(run: Run) -> None:
    line = summary_value(run, "searches run")
    assert line.startswith("10 of 10 (dashboard 5/5, openapi 5/5)"), line


def test_peak_concurrency_stayed_within_the_ceiling_of_three(run: Run) -> None:
    match = re.match(r"(\d+) \(ceiling (\d+)\)", summary_value(run, "peak concurrency"))
    assert match, run.output[-3000:]
    peak, ceiling = int(match.group(1)), int(match.group(2))
    assert ceiling == 3
    assert 1 <= peak <= ceiling


def test_the_submit_pods_created_the_batch_work_without_the_lease(run: Run) -> None:
    created = re.match(r"(\d+) app=blast Jobs", summary_value(run, "in-cluster batch"))
    assert created and int(created.group(1)) == 20, run.output[-3000:]


def test_the_non_compliant_submitter_was_denied_by_gate_a_and_left_nothing(run: Run) -> None:
    denials = summary_value(run, "denials by reason")
    gate_a = re.findall(r"(no_lease|not_holder|lease_expired) \(Gate A\)=(\d+)", denials)
    assert gate_a and sum(int(n) for _, n in gate_a) >= 1, denials
    assert summary_value(run, "non-compliant").endswith("Jobs left with its elb-job-id: 0")
    # The timeline shows what kubectl printed, word for word.
    assert re.search(
        r"DENIED\s+mallory \(no Lease\): Error from server \(Forbidden\): error when creating "
        r'"STDIN": admission webhook "search-admission\.elb-gate\.io" denied the request: '
        r"Gate A: ",
        run.output,
    ), run.output[-6000:]


def test_the_dead_holder_was_reclaimed_while_its_pod_was_terminating(run: Run) -> None:
    reclaim = summary_value(run, "dead-holder reclaim")
    match = re.match(
        r"(\d+\.\d) s after its pod was deleted \(its pod still Terminating; dead_holder,",
        reclaim,
    )
    # Reclaimed while Terminating is the outcome; how many seconds it took is the
    # demo's report (and make bench's figure), which a busy machine makes longer.
    assert match, reclaim
    assert re.search(r"LeaseHolderGoneReclaimed\): .*\(pod_terminating\)", run.output)


def test_the_orphaned_finalizer_was_flagged_and_left_to_an_operator(run: Run) -> None:
    orphan = summary_value(run, "orphaned finalizer")
    assert re.match(
        r"flagged \d+\.\d s after its creation \(300 s finalizer grace\), Warning Event; "
        r"policy warn: left for an operator, who deleted it at \d+\.\d s",
        orphan,
    ), orphan
    assert re.search(r"\borphan\s+controller \(OrphanedFinalizer\)", run.output)
    assert "OrphanedFinalizerDeleted" not in run.output


def test_liveness_ended_idle_and_both_replicas_served(run: Run) -> None:
    liveness = summary_value(run, "liveness")
    assert re.search(r"in use at [\d.]+ s -> idle at [\d.]+ s$", liveness), liveness
    served = [
        int(n)
        for n in re.findall(r"answered (\d+) reviews", summary_value(run, "webhook replicas"))
    ]
    assert len(served) == 2 and all(n > 0 for n in served), served


def test_nothing_is_left_behind_after_the_run(run: Run) -> None:
    assert list(run.tmp.glob("elb-gate-demo-*")) == []
    wait_until_gone(run.tmp)


@pytest.fixture
def interrupted(
    tmp_path: Path, control_plane: ControlPlane
) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.demo"],
        cwd=REPO,
        env=demo_env(tmp_path, control_plane),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        kill_all_using(tmp_path)
        reader.join(10)


def test_ctrl_c_mid_scenario_stops_every_process_and_removes_the_temporary_files(
    interrupted: tuple[subprocess.Popen[str], list[str]], tmp_path: Path
) -> None:
    proc, lines = interrupted
    wait_until(
        lambda: any(" burst " in line for line in lines) or proc.poll() is not None,
        RUN_DEADLINE_SECONDS,
        "the demo to reach its burst",
        detail=lambda: "".join(lines),
    )
    assert processes_using(tmp_path), "the demo's processes should be running by now"
    time.sleep(1.0)  # let the burst get going: submitters hold and wait for the Lease
    proc.send_signal(signal.SIGINT)  # what Ctrl-C delivers
    try:
        code = proc.wait(120)
    except subprocess.TimeoutExpired:
        pytest.fail(
            "the demo did not stop within 120 s of Ctrl-C; its output ends:\n"
            + "".join(lines)[-4000:]
            + "\nstill running:\n"
            + described(processes_using(tmp_path))
        )
    assert code == 130, "".join(lines)[-4000:]
    assert list(tmp_path.glob("elb-gate-demo-*")) == []
    wait_until_gone(tmp_path)
