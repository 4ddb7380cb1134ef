"""The benchmark's helper processes: the no-op floor server and the bare-API-round-trip
client. The webhook itself is started by :mod:`testbed.webhook_process`, as every
integration test starts it."""

from __future__ import annotations

import asyncio
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

from bench.api_floor import format_plan, from_json
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
        self,
        cert_file: str,
        key_file: str,
        cpu: int | None,
        reads: str | None = None,
        read_deadline: float | None = None,
    ) -> None:
        self.cert_file, self.key_file, self.cpu = cert_file, key_file, cpu
        self.reads = reads
        """A kubeconfig: read the API (census LIST + Lease GET) before allowing."""
        self.read_deadline = read_deadline
        """The deadline of each read (``None``: the webhook's default)."""
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> NoopServer:
        args = ["--cert", self.cert_file, "--key", self.key_file]
        if self.reads is not None:
            args += ["--reads", self.reads]
        if self.read_deadline is not None:
            args += ["--read-deadline", f"{self.read_deadline:g}"]
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


class ApiFloorSteps:
    """``python -m bench.api_floor`` (pinned to ``cpu``), driven over its stdin: one bare
    LIST + GET round trip per :meth:`step`, timed inside that process, or a closed loop
    (:meth:`closed_loop`). Use as ``async with``."""

    def __init__(
        self, kubeconfig: str, namespace: str, cpu: int | None, warmup: int, timeout: float = 60.0
    ) -> None:
        self.args = ["--kubeconfig", kubeconfig, "--namespace", namespace, "--warmup", str(warmup)]
        if cpu is not None:
            self.args += ["--cpu", str(cpu)]
        self.timeout = timeout
        self.process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> ApiFloorSteps:
        self.process = await asyncio.create_subprocess_exec(
            *_python_module("bench.api_floor", *self.args),
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        line = await self._line("the API floor to warm up")
        if line != b"ready":
            raise RuntimeError(f"bench.api_floor said {line!r}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.process is None:
            return
        assert self.process.stdin is not None
        self.process.stdin.close()  # end of input: it exits
        try:
            await asyncio.wait_for(self.process.wait(), 15)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()

    async def _line(self, what: str) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        try:
            raw = await asyncio.wait_for(self.process.stdout.readline(), self.timeout)
        except TimeoutError:
            raise RuntimeError(f"timed out after {self.timeout:g}s waiting for {what}") from None
        if not raw:
            raise RuntimeError(f"bench.api_floor exited (code {self.process.returncode})")
        return raw.rstrip(b"\n")

    async def _command(self, line: bytes, what: str) -> Any:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        await self.process.stdin.drain()
        return orjson.loads(await self._line(what))

    async def step(self) -> tuple[int, str]:
        doc = await self._command(b"step", "one API round trip")
        return int(doc["ns"]), str(doc["outcome"])

    async def closed_loop(self, plan: LoadPlan) -> Measured:
        """``plan`` as a closed loop in that process; its CPU as ``api_floor``."""
        doc = await self._command(f"plan {format_plan(plan)}".encode(), "a closed loop")
        return from_json(doc)


def scratch_dir() -> Path:
    """A private working directory (certificates, control plane state, logs)."""
    return Path(tempfile.mkdtemp(prefix="elb-gate-bench-"))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
