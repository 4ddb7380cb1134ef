"""One of elb-gate's components (``python -m webhook``, ``python -m controller``) as a
child process on the host, run as the cluster runs it.

Both take their settings from the environment (:meth:`ComponentProcess.spawn`), log
JSON lines, here to a file the test reads back (:meth:`ComponentProcess.logs`), bind
127.0.0.1:0 and log where they listen, serve ``/readyz`` and ``/metrics`` on their
metrics port, and stop on SIGTERM (SIGKILL is the crash).
:class:`~testbed.webhook_process.WebhookProcess` and
:class:`~testbed.controller_process.ControllerProcess` add what each is wired to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from testbed.api import JsonObj
from testbed.audit_log import read_audit
from testbed.controlplane import REPO, PodIdentity, halt
from testbed.waiting import wait_until


def host_env(kubeconfig: str | None = None) -> dict[str, str]:
    """The environment of a process the test bed starts on the host (a component, a
    submitter, the CLI): the host's without this repo's settings keys (``ELB_GATE_*``,
    ``BLAST_*``) or an in-cluster configuration, reaching the API server through
    ``kubeconfig`` when one is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELB_GATE_", "BLAST_"))}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = kubeconfig
    return env


class ComponentProcess:
    """The process, its log and its metrics port (restartable: :meth:`spawn` again)."""

    def __init__(
        self, identity: PodIdentity, log_file: Path, kubeconfig: str | None = None
    ) -> None:
        self.identity = identity
        """Its ServiceAccount's token bound to its Pod."""
        self.name = identity.pod
        self.kubeconfig = kubeconfig or identity.kubeconfig
        """How it reaches the API server (``KUBECONFIG`` in the settings wins)."""
        self.log_file = log_file
        """Everything the process wrote, every run appended."""
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port = 0
        self._records: list[JsonObj] = []
        self._offset = 0

    def spawn(
        self, module: str, settings: Mapping[str, str], listening: str, timeout: float
    ) -> JsonObj:
        """Start ``python -m module`` on the host (:func:`host_env`) as its Pod, logging
        JSON, with ``settings`` on top; return its log record ``listening`` (stopped, and
        its log in the failure, if it exits or does not log that in ``timeout`` s)."""
        env = host_env(self.kubeconfig)
        env.update(
            ELB_GATE_BIND_ADDRESS="127.0.0.1",
            ELB_GATE_POD_NAME=self.name,
            ELB_GATE_POD_NAMESPACE=self.identity.namespace,
            ELB_GATE_LOG_FORMAT="json",
            PYTHONUNBUFFERED="1",
        )
        env.update(settings)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self._records, self._offset = [], log.tell()  # this run's records only
            self.process = subprocess.Popen(
                [sys.executable, "-m", module],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            return self.wait_for_log(lambda r: r.get("msg") == listening, timeout)
        except BaseException:
            self.halt()
            raise

    # -- the log -------------------------------------------------------------------------

    def log(self) -> str:
        """Everything the process wrote so far (every run)."""
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, count: int = 30) -> str:
        """The last ``count`` lines of the log, for failure messages."""
        lines = self.log().splitlines()[-count:]
        return f"{self.name}'s last log lines:\n" + "\n".join(lines)

    def logs(self, msg: str | None = None) -> list[JsonObj]:
        """This run's JSON log records so far (those with message ``msg``, if given)."""
        records, self._offset = read_audit(self.log_file, self._offset)  # JSON lines alike
        self._records += records
        return [r for r in self._records if msg is None or r.get("msg") == msg]

    def wait_for_log(self, predicate: Callable[[JsonObj], bool], timeout: float = 30.0) -> JsonObj:
        """This run's first record matching ``predicate``, waiting up to ``timeout`` s;
        an exited process fails the wait at once."""

        def found() -> JsonObj | None:
            exited = not self.alive  # before reading: its last lines are written by then
            match = next((r for r in self.logs() if predicate(r)), None)
            if match is None and exited:
                raise AssertionError(f"{self.name} exited: no matching log line; {self.log_tail()}")
            return match

        return self.wait_until(found, timeout, f"{self.name}'s log line")

    def wait_until(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        """:func:`testbed.waiting.wait_until` (every 50 ms), the failure naming ``what``
        followed by this process's last log lines."""
        return wait_until(condition, timeout, what, interval=0.05, detail=self.log_tail)

    # -- the metrics port ----------------------------------------------------------------

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, str]:
        """(status, body) of a GET on the metrics port (a generous deadline: a busy
        machine can keep a process's loop from answering for seconds)."""
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def get_json(self, path: str) -> Any:
        status, body = self.get(path)
        if status != 200:
            raise AssertionError(f"{self.name} GET {path}: {status} {body}")
        return json.loads(body)

    def metrics(self) -> str:
        """The ``/metrics`` text."""
        return self.get("/metrics")[1]

    def samples(self, name: str) -> list[Sample]:
        """The samples named ``name``, or of the family ``name`` (a histogram's
        ``_bucket``, ``_count`` and ``_sum``), on ``/metrics`` now."""
        families = text_string_to_metric_families(self.metrics())
        return [s for f in families for s in f.samples if name in (s.name, f.name)]

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The value of the sample named ``name`` on ``/metrics`` (``None`` when absent)."""
        want = (name, dict(labels or {}))
        found = [s.value for s in self.samples(name) if (s.name, s.labels) == want]
        return float(found[0]) if found else None

    def ready(self, timeout: float = 2.0) -> bool:
        """The readiness probe: the process runs and ``/readyz`` answers 200."""
        if not self.alive or not self.metrics_port:
            return False
        try:
            return self.get("/readyz", timeout)[0] == 200
        except OSError:
            return False

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM (graceful: what it holds released) and wait."""
        assert self.process is not None
        self.process.terminate()  # Popen signals only a process it has not seen exit
        return self.process.wait(timeout)

    def kill(self) -> int | None:
        """SIGKILL: the process dies holding whatever it held (the crash case)."""
        if self.process is None:
            return None
        self.process.kill()
        return self.process.wait(15)

    def halt(self) -> int | None:
        """Terminate, killing if it does not exit in time; the exit code (``None``:
        never started)."""
        return None if self.process is None else halt(self.process)

    def stop(self) -> int | None:
        """:meth:`halt`: overridden by what has more to undo."""
        return self.halt()

    def __exit__(self, *exc: object) -> None:
        self.stop()
