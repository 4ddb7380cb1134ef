"""The benchmark's helper processes: the no-op floor server and the bare-API-round-trip
client. The webhook itself is started by :mod:`testbed.webhook_process`, as every
integration test starts it."""

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
from testbed.controlplane import REPO


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
    """A private working directory (certificates, control plane state, logs)."""
    return Path(tempfile.mkdtemp(prefix="elb-gate-bench-"))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
