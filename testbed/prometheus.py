"""A real Prometheus (the ``prometheus`` binary; ``make tools`` installs it) scraping
elb-gate's metric endpoints with the labels a ServiceMonitor gives them.

    with PrometheusServer([Target("elb-gate-webhook-metrics", "127.0.0.1:9090",
                                  "elb-gate-webhook-abc12-x1y2z")], workdir) as prom:
        prom.wait_for_scrapes(8)
        render_dashboard.render(prom.client, Path("docs/dashboard.png"), ...)

``job`` is the metrics Service's name (what ``job`` is under the Prometheus Operator),
``namespace`` elb-gate's namespace and ``pod`` the replica's Pod, so the dashboard's
and the alerts' queries (``job=…``, ``and on (pod)``) read the series as on a cluster.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from manifests.render_dashboard import Prometheus
from testbed.controlplane import halt
from testbed.install import SYSTEM_NAMESPACE
from testbed.waiting import wait_until

WEBHOOK_JOB = "elb-gate-webhook-metrics"
CONTROLLER_JOB = "elb-gate-controller-metrics"


@dataclass(frozen=True)
class Target:
    """One scrape target: ``host:port`` serving ``/metrics``."""

    job: str
    address: str
    pod: str
    namespace: str = SYSTEM_NAMESPACE


class PrometheusServer:
    """The server as a child process, for the life of a ``with`` block."""

    def __init__(
        self, targets: list[Target], workdir: Path, *, scrape_seconds: float = 2.0
    ) -> None:
        self.targets = targets
        self.workdir = workdir
        self.scrape_seconds = scrape_seconds
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @staticmethod
    def available() -> bool:
        return shutil.which("prometheus") is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> Prometheus:
        return Prometheus(self.url)

    def config(self) -> dict[str, object]:
        interval = f"{self.scrape_seconds:g}s"
        return {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": True,
                    "static_configs": [
                        {"targets": [t.address], "labels": {"namespace": t.namespace, "pod": t.pod}}
                        for t in self.targets
                        if t.job == job
                    ],
                }
                for job in dict.fromkeys(t.job for t in self.targets)
            ],
        }

    def start(self) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed: `make tools` installs it")
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "prometheus.yml").write_text(json.dumps(self.config()))
        with socket.socket() as sock:  # a port that is free a moment before prometheus binds it
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        with (self.workdir / "prometheus.log").open("wb") as log:  # the child keeps it open
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={self.workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.started_at = time.time()
        wait_until(lambda: self._running() and self._ready(), 90, "Prometheus ready", interval=0.5)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:  # refused, or an error status (urllib's errors are OSErrors)
            return False

    def wait_for_scrapes(self, count: int, timeout: float = 120) -> None:
        """Until every target was scraped successfully ``count`` times."""
        window = f"{int(count * self.scrape_seconds * 2)}s"
        query = f"count_over_time((up == 1)[{window}:]) >= {count}"
        self._wait_for_every_target(query, timeout, f"{count} scrapes of every target")

    def wait_for_scrape_after(self, moment: float, timeout: float = 60) -> None:
        """Until every target was scraped after ``moment`` (unix seconds), so what they
        export at ``moment`` is in Prometheus."""
        query = f"timestamp(up) > {moment:.3f}"
        self._wait_for_every_target(query, timeout, "a scrape of every target")

    def _wait_for_every_target(self, query: str, timeout: float, what: str) -> None:
        """Until ``query`` answers one series per target (while the server runs)."""

        def answered() -> bool:
            try:
                found = self.client.query(query, time.time())
            except (OSError, RuntimeError):
                return False
            return len(found) == len(self.targets)

        wait_until(lambda: self._running() and answered(), timeout, what, interval=0.5)

    def _running(self) -> bool:
        """True while the server runs; once it has exited no wait for it can end well,
        so this raises, ending the wait at once."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"prometheus exited: see {self.workdir / 'prometheus.log'}")
        return True

    def stop(self) -> None:
        if self.process is not None:
            halt(self.process, 30)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
