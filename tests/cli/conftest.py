"""Run the real `elb-gate` CLI (a subprocess) against the real control plane,
with elb-gate's webhook registered and a gated namespace per test (the
namespace of the kubeconfig context the CLI runs with)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.component import host_env
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import SHORT_LEASES, WebhookProcess

ROOT = Path(__file__).resolve().parents[2]

SMALL = {
    "BLAST_SUBMIT_LEASE_TTL_SECONDS": "15",
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": "1",
    "BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS": "60",
    "BLAST_CAPACITY_WAIT_MAX_SECONDS": "60",
}
"""TTL 15 s (exec timeout 13 s), deadlines long enough never to fire by accident."""

RECORDER = """\
import os, sys, time
log, tag, go = sys.argv[1], sys.argv[2], sys.argv[3]
def note(what):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{what} {tag} {os.getpid()}\\n".encode())
    os.close(fd)
note("start")
end = time.monotonic() + 120
while not os.path.exists(go) and time.monotonic() < end:
    time.sleep(0.02)
note("end")
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""
"""COMMAND for the tests: appends `start`/`end` lines (O_APPEND, so two writers
interleave whole lines) and holds until the `go` file exists ("-" = at once)."""


@dataclass
class CliRun:
    """One `elb-gate` process; stderr goes to a file so a test can watch it."""

    proc: subprocess.Popen[bytes]
    err_path: Path
    out_path: Path
    code: int | None = field(default=None)

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    @property
    def stdout(self) -> str:
        return self.out_path.read_text()

    def wait_for_stderr(self, text: str, deadline: float = 60.0) -> None:
        wait_until(
            lambda: text in self.stderr or self.proc.poll() is not None,
            deadline,
            f"{text!r} on stderr",
        )
        assert text in self.stderr, self.stderr

    def wait(self, deadline: float = 90.0) -> int:
        self.code = self.proc.wait(timeout=deadline)
        return self.code


@dataclass
class Cli:
    """Starts `python -m client` as `user` with the small settings, in ``ns``
    (the namespace of the user's kubeconfig context)."""

    cp: ControlPlane
    ns: str
    tmp: Path
    runs: list[CliRun] = field(default_factory=list)

    def kubeconfig(self, user: str = "alice") -> str:
        """``user``'s kubeconfig, its context in this test's namespace."""
        path = self.tmp / "kubeconfigs" / f"{user}.kubeconfig"
        if not path.exists():
            self.cp.write_kubeconfig(path, user, self.cp.token(user), self.ns)
        return str(path)

    def env(self, user: str = "alice", **extra: str) -> dict[str, str]:
        return {**host_env(self.kubeconfig(user)), **SMALL, **extra}

    def start(self, *args: str, user: str = "alice", **env: str) -> CliRun:
        n = len(self.runs)
        err, out = self.tmp / f"cli-{n}.err", self.tmp / f"cli-{n}.out"
        with err.open("wb") as err_f, out.open("wb") as out_f:
            proc = subprocess.Popen(
                [sys.executable, "-m", "client", *args],
                stdout=out_f,
                stderr=err_f,
                env=self.env(user, **env),
                cwd=ROOT,
            )
        run = CliRun(proc, err, out)
        self.runs.append(run)
        return run

    def run(self, *args: str, user: str = "alice", **env: str) -> CliRun:
        run = self.start(*args, user=user, **env)
        run.wait()
        return run

    def recorder(self, tag: str, go: str = "-") -> list[str]:
        """COMMAND argv: record start/end of `tag`, hold until `go` exists."""
        script = self.tmp / "record.py"
        script.write_text(RECORDER)
        go_path = "-" if go == "-" else str(self.tmp / go)
        if go == "-":
            go_path = str(script)  # exists already: end at once
        return [sys.executable, str(script), str(self.log), tag, go_path]

    @property
    def log(self) -> Path:
        return self.tmp / "commands.log"

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def release_go(self, go: str) -> None:
        (self.tmp / go).write_text("go")


@pytest.fixture(scope="package")
def hook(control_plane: ControlPlane) -> Iterator[WebhookProcess]:
    """elb-gate's webhook, registered with the shipped configurations (as for the client)."""
    with WebhookProcess(control_plane, SHORT_LEASES) as running:
        yield running


@pytest.fixture
def ns(fresh_ns: str, hook: WebhookProcess) -> str:
    """A gated namespace of this test's own."""
    return hook.install.gate(fresh_ns)


@pytest.fixture
def cli(control_plane: ControlPlane, ns: str, tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(control_plane, ns, tmp_path)
    try:
        yield runner
    finally:
        for run in runner.runs:
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()
