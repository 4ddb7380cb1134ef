"""The benchmark's helper processes: the API emulator (bench.emulator_host), the
no-op floor server, and the bare-API-round-trip client. The webhook itself is
started by tests/support/webhook_process.py, as every other suite starts it."""

from __future__ import annotations

import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import orjson

from bench.load import LoadPlan, Measured
from tests.support.webhook_process import REPO, WEBHOOK_USER


def _python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


class _Lines:
    """Lines a child writes to stdout, readable with a deadline."""

    def __init__(self, stream: Any) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for raw in stream:
            self._queue.put(raw.decode(errors="replace").rstrip("\n"))

    def next(self, timeout: float, what: str) -> str:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}") from None


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


class EmulatorProcess:
    """``python -m bench.emulator_host``: the API emulator in its own process, so its
    CPU is its own (and pinned). It quacks like :class:`tests.kube_emulator.Emulator`
    as far as ``WebhookProcess(..., register=False)`` needs: ``users`` and
    ``kubeconfig(user)``."""

    def __init__(self, workdir: Path, cpu: int | None) -> None:
        self.state_dir = workdir / "emulator"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_file = workdir / "emulator.log"
        self.cpu = cpu
        self.users: dict[str, Any] = {name: None for name in ("admin", WEBHOOK_USER)}
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self._lines: _Lines | None = None

    def start(self, timeout: float = 60.0) -> EmulatorProcess:
        args = ["--state-dir", str(self.state_dir)]
        if self.cpu is not None:
            args += ["--cpu", str(self.cpu)]
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                _python_module("bench.emulator_host", *args),
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self._lines = _Lines(self.process.stdout)
        while True:
            line = self._lines.next(timeout, "the emulator to start")
            if line.startswith("serving "):
                self.url = line.split()[1]
            elif line == "ready":
                return self

    def grow(self, namespace: str, jobs: int, holder: str, timeout: float = 300.0) -> int:
        """Make ``namespace`` hold ``jobs`` planned Jobs and the submit Lease held by
        ``holder``; returns the Job count the emulator reports."""
        assert self.process is not None and self.process.stdin is not None
        assert self._lines is not None
        self.process.stdin.write(f"grow {namespace} {jobs} {holder}\n".encode())
        self.process.stdin.flush()
        answer = self._lines.next(timeout, f"the emulator to hold {jobs} Jobs")
        if not answer.startswith("ok "):
            raise RuntimeError(f"emulator host: {answer}\n{self.log()[-2000:]}")
        return int(answer.split()[1])

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kubeconfig(self, user: str = "admin") -> str:
        """The kubeconfig the emulator wrote for ``user``."""
        return str(self.state_dir / f"kubeconfig-{user}")

    def stop(self) -> None:
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()  # the host stops the emulator at end of input
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                pass
        _stop(self.process)
        self.process = None

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


class NoopServer:
    """``python -m bench.noop_server`` with the webhook's certificate, on one CPU (with
    ``reads``: the no-op that first makes search admission's reads)."""

    def __init__(
        self, cert_file: str, key_file: str, cpu: int | None, reads: str | None = None
    ) -> None:
        self.cert_file, self.key_file, self.cpu = cert_file, key_file, cpu
        self.reads = reads
        """A kubeconfig: read the API (census LIST + Lease GET) before allowing."""
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> NoopServer:
        args = ["--cert", self.cert_file, "--key", self.key_file]
        if self.reads is not None:
            args += ["--reads", self.reads]
        if self.cpu is not None:
            args += ["--cpu", str(self.cpu)]
        self.process = subprocess.Popen(
            _python_module("bench.noop_server", *args), cwd=REPO, stdout=subprocess.PIPE
        )
        line = _Lines(self.process.stdout).next(timeout, "the no-op server to listen")
        if not line.startswith("ready "):
            raise RuntimeError(f"no-op server said {line!r}")
        self.port = int(line.split()[1])
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> None:
        _stop(self.process)
        self.process = None


def run_api_floor(
    kubeconfig: str, namespace: str, plans: list[LoadPlan], cpu: int | None
) -> list[Measured]:
    """Run ``python -m bench.api_floor`` (pinned to ``cpu``) with ``plans`` in order."""
    args = ["--kubeconfig", kubeconfig, "--namespace", namespace]
    if cpu is not None:
        args += ["--cpu", str(cpu)]
    for p in plans:
        args += ["--plan", f"{p.concurrency}:{p.requests}:{p.warmup}:{p.max_seconds}"]
    done = subprocess.run(
        _python_module("bench.api_floor", *args), cwd=REPO, capture_output=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.api_floor failed:\n{done.stderr.decode()[-3000:]}")
    out = []
    for line in done.stdout.splitlines():
        doc = orjson.loads(line)
        m = Measured(doc["latencies_ns"], doc["wall_seconds"])
        m.cpu_seconds.update(doc["cpu_seconds"])
        m.outcomes.update(doc["outcomes"])
        out.append(m)
    return out


def scratch_dir() -> Path:
    """A private working directory (certificates, emulator state, logs)."""
    return Path(tempfile.mkdtemp(prefix="elb-gate-bench-"))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
