"""The story, directed: a burst of ten searches through both submit paths, a
non-compliant submitter, a holder whose pod dies, an orphaned finalizer, a webhook
replica taken away mid-burst, and the namespace going idle at the end.

The director runs in the main thread and only starts things and waits on
conditions; what happens is seen by the observer (from the emulator's committed
writes) and by the submitters (what their clients were told).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from elbgate.names import JOB_ID_LABEL
from tests.demo.cluster import DOOMED_POD, NAMESPACE, Cluster
from tests.demo.job_runner import JobRunner
from tests.demo.jobs import new_search_id
from tests.demo.observer import Observations, Observer
from tests.demo.submitters import (
    DashboardSubmitter,
    DoomedSubmitter,
    Outcome,
    ProcessSubmitter,
    rogue,
)
from tests.demo.timeline import Timeline

SEARCHES_PER_PATH = 5
ROGUE_AFTER_SECONDS = 1.5
DOOMED_AFTER_SECONDS = 3.0
POD_DIES_AFTER_SECONDS = 1.0
"""How long the doomed replica holds the Lease before its pod is deleted."""
FAILOVER_AFTER_OPENED = 4
"""Replica A is taken away once this many searches have been admitted."""
DEADLINE_SECONDS = 150.0
"""Give up waiting (and report what did not happen) after this long."""


@dataclass
class Report:
    """Everything the summary is made from."""

    seen: Observations
    burst: list[Outcome]
    """The ten searches of the burst."""
    orphan: Outcome
    rogue: Outcome
    rogue_jobs_left: int
    doomed_holder: str
    doomed_acquired_at: float | None
    pod_deleted_at: float | None
    failover_at: float | None
    finished_at: float
    timed_out: bool
    observer_errors: list[BaseException] = field(default_factory=list)


class Scenario:
    """Plays the story once against a started :class:`Cluster`."""

    def __init__(self, cluster: Cluster, timeline: Timeline) -> None:
        self.cluster = cluster
        self.timeline = timeline
        self.names: dict[str, str] = {}
        self.stop = threading.Event()
        self.observer = Observer(cluster.emu, NAMESPACE, cluster.settings, timeline, self.names)
        self.runner = JobRunner(cluster.emu, NAMESPACE)
        self.dashboards: list[DashboardSubmitter] = []
        self.processes: list[ProcessSubmitter] = []
        self.doomed: DoomedSubmitter | None = None

    def _search(self, label: str) -> str:
        job_id = new_search_id()
        self.names[job_id] = label
        return job_id

    def play(self) -> Report:
        """Run the story to its end (or the deadline) and report."""
        cluster, timeline = self.cluster, self.timeline
        self.observer.attach()
        self.runner.start()
        begin = timeline.elapsed()

        for n in range(1, SEARCHES_PER_PATH + 1):
            label = f"dashboard-{n}"
            self.dashboards.append(
                DashboardSubmitter(cluster, label, self._search(label), timeline, self.stop)
            )
            label = f"openapi-{n}"
            self.processes.append(ProcessSubmitter(cluster, label, self._search(label), timeline))
        # Built before the burst: it loads the API client library in this process.
        self.doomed = DoomedSubmitter(cluster, timeline, self.stop)
        orphan = ProcessSubmitter(
            cluster, "openapi-6", self._search("openapi-6"), timeline, batch_work=False
        )
        self.processes.append(orphan)
        timeline.emit(
            "burst",
            f"{2 * SEARCHES_PER_PATH} searches fired at once: {SEARCHES_PER_PATH} via the "
            f"dashboard (raw-HTTP Lease client + kubectl), {SEARCHES_PER_PATH} via the OpenAPI "
            f"service (elb-gate submit); plus openapi-6, whose batch work will never appear",
        )
        for dash in self.dashboards:
            dash.start()
        for proc in self.processes:
            proc.start()

        bad = rogue(cluster, self._search("rogue"), timeline)
        self.processes.append(bad)
        pod_deleted_at: float | None = None
        failover_at: float | None = None
        rogue_started = doomed_started = False
        deadline = begin + DEADLINE_SECONDS
        burst = [d.outcome for d in self.dashboards]
        burst += [p.outcome for p in self.processes if p.outcome.label.startswith("openapi-")
                  and p is not orphan]  # fmt: skip

        def finished(seen: Observations) -> bool:
            return (
                all(o.done for o in [*burst, orphan.outcome, bad.outcome])
                and pod_deleted_at is not None
                and bool(seen.reclaims)
                and bool(seen.orphans_deleted)
                and failover_at is not None
                and set(seen.finished) >= {o.job_id for o in burst if o.exit_code == 0}
            )

        while timeline.elapsed() < deadline:
            now = timeline.elapsed() - begin
            if not rogue_started and now >= ROGUE_AFTER_SECONDS:
                rogue_started = True
                timeline.emit("rogue", "a submitter without the Lease runs elastic-blast submit "
                              "as user rogue")  # fmt: skip
                bad.start()
            if not doomed_started and now >= DOOMED_AFTER_SECONDS:
                doomed_started = True
                self.doomed.start()
            if (
                pod_deleted_at is None
                and self.doomed.acquired_at is not None
                and timeline.elapsed() >= self.doomed.acquired_at + POD_DIES_AFTER_SECONDS
            ):
                cluster.emu.delete("pods", NAMESPACE, DOOMED_POD)
                self.doomed.pod_gone.set()
                pod_deleted_at = timeline.elapsed()
                timeline.emit("pod", f"pod {NAMESPACE}/{DOOMED_POD} deleted while it holds the "
                              "Lease: its submitter is gone, nothing renews or releases")  # fmt: skip
            if failover_at is None and len(self.observer.seen.opened) >= FAILOVER_AFTER_OPENED:
                failover_at = timeline.elapsed()
                cluster.fail_over("B")
                timeline.emit("failover", "Service elb-system/elb-gate-webhook re-pointed at "
                              "replica B, then replica A stopped (SIGTERM, drained)")  # fmt: skip
            if finished(self.observer.seen):
                break
            self.observer.wait_for(lambda _seen: False, 0.1)

        # The last word is the controller's: the namespace must go idle on its own.
        self.observer.wait_for(
            lambda seen: seen.in_use is False, max(1.0, deadline - timeline.elapsed())
        )
        timed_out = timeline.elapsed() >= deadline
        self.runner.stop()
        self.observer.detach()
        left = cluster.emu.list(
            "jobs", NAMESPACE, label_selector=f"{JOB_ID_LABEL}={bad.outcome.job_id}"
        )
        return Report(
            seen=self.observer.seen,
            burst=burst,
            orphan=orphan.outcome,
            rogue=bad.outcome,
            rogue_jobs_left=len(left),
            doomed_holder=self.doomed.holder,
            doomed_acquired_at=self.doomed.acquired_at,
            pod_deleted_at=pod_deleted_at,
            failover_at=failover_at,
            finished_at=timeline.elapsed(),
            timed_out=timed_out,
            observer_errors=list(self.observer.errors),
        )

    def shutdown(self) -> None:
        """Stop every submitter still running (also after Ctrl-C)."""
        self.stop.set()
        for proc in self.processes:
            proc.terminate()
        for thread in [*self.dashboards, self.doomed]:
            if thread is not None and thread.is_alive():
                thread.join(15)
        self.runner.stop()
        self.observer.detach()
