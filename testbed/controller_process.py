"""Start a real ``python -m controller`` against the control plane, and watch it.

Shared by the controller integration tests, the demo and the reliability suites::

    with ControllerProcess.start(cp, name="ctl-a", namespaces=["blast"]) as ctl:
        ctl.wait_until(lambda: ctl.is_leader(), 30, "ctl-a leads")
        print(ctl.get_json("/liveness"))

The process authenticates with a token of the controller's ServiceAccount
(``system:serviceaccount:elb-system:elb-gate-controller``) bound to a Pod named
after it, granted exactly what ``manifests/`` grants; it logs JSON lines on stderr
(collected in :attr:`ControllerProcess.records`), and binds its metrics port on
127.0.0.1:0; the chosen port is read from its "metrics server listening" log line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from elbgate.settings import ControllerSettings
from testbed.controlplane import REPO, ControlPlane
from testbed.install import SYSTEM_NAMESPACE, Installation, component_env
from testbed.waiting import wait_until

CONTROLLER_NAMESPACE = SYSTEM_NAMESPACE
CONTROLLER_SA = "elb-gate-controller"
LEADER_LEASE = (CONTROLLER_NAMESPACE, ControllerSettings().leader_lease_name)
"""(namespace, name) of the Lease the controller replicas elect their leader with."""
CONTROLLER_USER = f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SA}"


class ControllerProcess:
    """One running controller process and what it has logged."""

    def __init__(self, proc: subprocess.Popen[str], name: str) -> None:
        self.proc = proc
        self.name = name
        self.records: list[dict[str, Any]] = []
        self.raw_lines: list[str] = []
        self._cond = threading.Condition()
        self.metrics_port = 0
        self._reader = threading.Thread(target=self._read, name=f"{name}-stderr", daemon=True)
        self._reader.start()

    @classmethod
    def start(
        cls,
        cp: ControlPlane,
        *,
        name: str = "controller-0",
        namespaces: Iterable[str] = ("default",),
        resync_seconds: float = 1.0,
        leader_lease_seconds: float = 4.0,
        leader_renew_seconds: float = 1.0,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = 120.0,
    ) -> ControllerProcess:
        """Start a controller as ``name`` watching ``namespaces`` (created if missing) and
        wait until its metrics port is known. ``env`` adds or overrides variables."""
        namespaces = list(namespaces)
        install = Installation.on(cp)
        for ns in namespaces:
            install.gate(ns)
        identity = install.identity("controller", name)
        kubeconfig = (env or {}).get("KUBECONFIG") or identity.kubeconfig
        settings = {
            "ELB_GATE_NAMESPACES": ",".join(namespaces),
            "ELB_GATE_RESYNC_SECONDS": str(resync_seconds),
            "ELB_GATE_LEADER_LEASE_SECONDS": str(leader_lease_seconds),
            "ELB_GATE_LEADER_RENEW_SECONDS": str(leader_renew_seconds),
            "ELB_GATE_METRICS_PORT_NUMBER": "0",
            **(env or {}),
        }
        full_env = component_env(identity, kubeconfig, settings)
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller"],
            cwd=REPO,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        ctl = cls(proc, name)
        try:
            record = ctl.wait_for_log(
                lambda r: r.get("msg") == "metrics server listening", ready_timeout
            )
        except Exception:
            ctl.stop()
            raise
        ctl.metrics_port = int(record["port"])
        return ctl

    # -- output ----------------------------------------------------------------

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            try:
                record = json.loads(line)
            except ValueError:
                record = {"msg": line, "level": "raw"}
            with self._cond:
                self.raw_lines.append(line)
                if isinstance(record, dict):
                    self.records.append(record)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def logs(self, msg: str | None = None) -> list[dict[str, Any]]:
        """Records so far (those with message ``msg``, if given)."""
        with self._cond:
            return [r for r in self.records if msg is None or r.get("msg") == msg]

    def log_tail(self, count: int = 30) -> str:
        """The last ``count`` lines the process wrote to stderr, for failure messages."""
        with self._cond:
            lines = self.raw_lines[-count:]
        return f"{self.name}'s last log lines:\n" + "\n".join(lines)

    def wait_for_log(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30.0
    ) -> dict[str, Any]:
        """The first record matching ``predicate``, waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for record in self.records:
                    if predicate(record):
                        return record
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise TimeoutError(f"{self.name}: no matching log line; {self.log_tail()}")
                self._cond.wait(min(remaining, 0.5))

    # -- HTTP ------------------------------------------------------------------

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.metrics_port}{path}"

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, str]:
        """(status, body) of a GET on the metrics port (a generous deadline: a busy
        machine can keep the controller's loop from answering for seconds, and
        :meth:`is_leader` would read that as not leading)."""
        try:
            with urllib.request.urlopen(self.url(path), timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def get_json(self, path: str) -> Any:
        status, body = self.get(path)
        if status != 200:
            raise AssertionError(f"{self.name} GET {path}: {status} {body}")
        return json.loads(body)

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The value of one sample on /metrics (``None`` when absent)."""
        _, body = self.get("/metrics")
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == name and sample.labels == dict(labels or {}):
                    return float(sample.value)
        return None

    def is_leader(self) -> bool:
        try:
            return self.metric("elb_gate_leader") == 1.0
        except OSError:
            return False

    def ready(self) -> bool:
        try:
            return self.get("/readyz")[0] == 200
        except OSError:
            return False

    # -- lifecycle ---------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """:func:`testbed.waiting.wait_until` (every 50 ms), the failure naming ``what``
        followed by this process's last log lines."""
        wait_until(condition, timeout, what, interval=0.05, detail=self.log_tail)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM (graceful: leadership released) and wait."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> int:
        """SIGKILL: the process dies holding whatever it held (the crash case)."""
        if self.alive:
            self.proc.kill()
        return self.proc.wait(15)

    def stop(self) -> None:
        """Terminate, killing if it does not exit in time; always reaps the process."""
        try:
            self.terminate()
        except subprocess.TimeoutExpired:
            self.kill()
        self._reader.join(5)

    def __enter__(self) -> ControllerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
