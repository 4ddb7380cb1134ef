"""A steady stream of admissions (promise 5): one submitter opening search after search.

Each cycle takes the Lease with elb-gate's client, checks the census, creates a
search's Jobs, and releases. Every admission the API answered is counted by outcome,
so a disruption's cost is a number: which writes failed, with what, and when.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial

from client import CoordinationError, SubmitLease, SyncKube, read_census
from elbgate.kube.api import ApiError, ApiUnavailable
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from testbed.controlplane import ControlPlane
from testbed.reliability.faults import REFUSALS
from testbed.reliability.jobs import JobPlan, create_job, job_body
from testbed.reliability.rig import CEILING, SHARED_ENV


@dataclass
class StreamStats:
    attempts: int = 0
    admitted: int = 0
    searches: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    success_times: list[float] = field(default_factory=list)


class SteadyStream:
    """A background submitter (a plain user, elb-gate's library)."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.namespace = namespace
        self.config = KubeConfig.load(cp.kubeconfig(cp.plain_user()))
        self.stats = StreamStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-stream", daemon=True)
        self.settings = Settings.from_env(SHARED_ENV)

    def start(self) -> SteadyStream:
        self._thread.start()
        return self

    def stop(self) -> StreamStats:
        self._stop.set()
        self._thread.join(60)
        return self.stats

    def _failed(self, what: str, exc: Exception) -> None:
        text = str(exc)
        kind = next((k for k in REFUSALS if k in text), "")
        self.stats.failures[f"{what}: {kind or exc.__class__.__name__}"] += 1
        if not kind:
            self.stats.unexpected.append(f"{what}: {text[:300]}")

    def _run(self) -> None:
        with closing(SyncKube(self.config, timeout=10)) as kube:
            while not self._stop.is_set():
                self._cycle(kube)
                self._stop.wait(0.05)

    def _cycle(self, kube: SyncKube) -> None:
        lease = SubmitLease(self.namespace, gate=self.settings.gate, kube=kube, source="steady")
        self.stats.attempts += 1
        try:
            acquired = lease.acquire().acquired
        except CoordinationError as exc:
            self._failed("lease write", exc)
            return
        if not acquired:
            return
        self.stats.admitted += 1
        self.stats.success_times.append(time.monotonic())
        try:
            if read_census(kube, self.namespace, self.settings.gate).count >= CEILING:
                return
            job_id = uuid.uuid4().hex
            for app in ("submit", "finalizer"):
                plan = JobPlan(app, f"steady-{job_id[:10]}-{app}", 1.0, "ok", 2)
                body = job_body(self.namespace, plan, job_id, f"db-{job_id[:10]}")
                self.stats.attempts += 1
                try:
                    kube.run(partial(create_job, body=body, namespace=self.namespace))
                except (ApiError, ApiUnavailable) as exc:
                    self._failed("job create", exc)
                    return
                self.stats.admitted += 1
                self.stats.success_times.append(time.monotonic())
            self.stats.searches += 1
        except CoordinationError as exc:
            self._failed("census", exc)
        finally:
            try:
                lease.release()
            except CoordinationError as exc:
                self._failed("lease release", exc)
