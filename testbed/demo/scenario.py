"""The story, directed: a burst of ten searches through both submit paths, a search whose
batch work never appears, a non-compliant submitter, a holder whose pod dies, an
operator acting on the orphan warning, and the namespace going idle at the end.

The director runs in the main thread and only starts things and waits on conditions;
what happens is seen by the observer (the API server's watches) and by the submitters
(what their clients were told).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from elbgate.names import JOB_ID_LABEL
from testbed import elastic_blast as elb
from testbed.demo.observer import Observations, Observer
from testbed.demo.searches import short
from testbed.demo.submit_pods import SubmitPods
from testbed.demo.submitters import (
    DashboardSubmitter,
    DoomedSubmitter,
    Outcome,
    ProcessSubmitter,
)
from testbed.demo.system import OPERATOR_USER, ROGUE_USER, System
from testbed.demo.timeline import Timeline

SEARCHES_PER_PATH = 5
ROGUE_AFTER_SECONDS = 5.0
DOOMED_AFTER_SECONDS = 10.0
POD_DIES_AFTER_SECONDS = 2.0
"""How long the doomed replica holds the Lease before its pod is deleted."""
POD_GRACE_SECONDS = 30
"""The deletion's grace period (the pod's terminationGracePeriodSeconds)."""
DEADLINE_SECONDS = 900.0
"""Give up waiting (and report what did not happen) after this long."""


@dataclass
class Report:
    """Everything the summary is made from, filled in as the story goes."""

    seen: Observations
    burst: list[Outcome]
    """The ten searches of the burst."""
    orphan_name: str
    """The finalizer whose batch work never appears."""
    rogue: Outcome
    doomed_holder: str
    started_at: float
    rogue_jobs_left: int = 0
    pod_deleted_at: float | None = None
    pod_terminating_at_reclaim: bool | None = None
    operator_deleted_at: float | None = None
    batch_jobs_created: int = 0
    finished_at: float = 0.0
    errors: list[str] = field(default_factory=list)


class Scenario:
    """Plays the story once against a started :class:`System`."""

    def __init__(self, system: System, timeline: Timeline) -> None:
        self.system = system
        self.timeline = timeline
        self.names: dict[str, str] = {}
        self.stop = threading.Event()
        self.observer = Observer(
            system.cp.admin, system.namespace, system.settings, timeline, self.names
        )
        self.submit_pods = SubmitPods(system.cp, system.namespace)
        self.dashboards: list[DashboardSubmitter] = []
        self.processes: list[ProcessSubmitter] = []
        self.doomed = DoomedSubmitter(system, timeline, self.stop)

    def _search(self, label: str) -> str:
        job_id = elb.search_id()
        self.names[job_id] = label
        return job_id

    def play(self) -> Report:
        """Run the story to its end (or the deadline) and report."""
        system, timeline, ns = self.system, self.timeline, self.system.namespace
        self.observer.attach()
        self.submit_pods.start()
        begin = timeline.elapsed()

        orphan = ProcessSubmitter(
            system, "openapi-6", self._search("openapi-6"), timeline, batch_work=False
        )
        self.processes.append(orphan)
        timeline.emit(
            "orphan",
            "openapi-6 runs elastic-blast submit through elb-gate submit; its batch work "
            f"will never appear (its finalizer holds a slot for the "
            f"{system.settings.gate.finalizer_grace_seconds} s finalizer grace, then none)",
        )
        orphan.start()
        openapi: list[ProcessSubmitter] = []
        for n in range(1, SEARCHES_PER_PATH + 1):
            label = f"dashboard-{n}"
            self.dashboards.append(
                DashboardSubmitter(system, label, self._search(label), timeline, self.stop)
            )
            label = f"openapi-{n}"
            openapi.append(ProcessSubmitter(system, label, self._search(label), timeline))
        timeline.emit(
            "burst",
            f"{2 * SEARCHES_PER_PATH} searches fired at once: {SEARCHES_PER_PATH} via the "
            f"dashboard (Celery task: raw-HTTPS Lease client + kubectl, re-queued after 30 s "
            f"when busy or full), {SEARCHES_PER_PATH} via the OpenAPI service (elb-gate submit)",
        )
        fired: list[DashboardSubmitter | ProcessSubmitter] = [*self.dashboards, *openapi]
        for submitter in fired:
            submitter.start()
        burst = [s.outcome for s in fired]

        bad = ProcessSubmitter(
            system, f"{ROGUE_USER} (no Lease)", self._search("rogue"), timeline, rogue=True
        )
        self.processes += [*openapi, bad]
        orphan_name = f"elb-finalizer-{short(orphan.outcome.job_id)}"
        report = Report(
            self.observer.seen, burst, orphan_name, bad.outcome, self.doomed.lease.holder, begin
        )
        deadline = begin + DEADLINE_SECONDS
        self._direct(report, bad, deadline)

        # The last word is the controller's: the namespace must go idle on its own.
        since = report.operator_deleted_at or 0.0
        self.observer.wait_for(
            lambda seen: seen.in_use is False and seen.liveness[-1][0] >= since,
            max(1.0, deadline - timeline.elapsed()),
        )
        self.submit_pods.stop()
        self.observer.detach()
        left = system.cp.admin.list(
            "jobs", ns, label_selector=f"{JOB_ID_LABEL}={bad.outcome.job_id}"
        )
        report.rogue_jobs_left = len(left)
        report.batch_jobs_created = self.submit_pods.created
        report.errors = [*self.submit_pods.errors, *(str(e) for e in self.observer.errors)]
        report.finished_at = timeline.elapsed()
        return report

    def _direct(self, report: Report, bad: ProcessSubmitter, deadline: float) -> None:
        """The moves after the burst, each once what it follows was seen; what has not
        happened by ``deadline`` stays unset in ``report``."""
        system, timeline, ns = self.system, self.timeline, self.system.namespace
        self._sleep_until(report.started_at + ROGUE_AFTER_SECONDS)
        timeline.emit(
            "rogue",
            f"a submitter without the Lease runs elastic-blast submit as user {ROGUE_USER}",
        )
        bad.start()
        self._sleep_until(report.started_at + DOOMED_AFTER_SECONDS)
        self.doomed.start()
        if not self._seen(lambda _seen: self.doomed.acquired_at is not None, deadline):
            return
        assert self.doomed.acquired_at is not None
        self._sleep_until(self.doomed.acquired_at + POD_DIES_AFTER_SECONDS)
        system.cp.admin.delete("pods", ns, system.doomed.pod, grace_seconds=POD_GRACE_SECONDS)
        report.pod_deleted_at = timeline.elapsed()
        timeline.emit(
            "pod",
            f"pod {ns}/{system.doomed.pod} deleted (grace {POD_GRACE_SECONDS} s) while it "
            "holds the Lease: Terminating, its submitter stops; nothing renews or releases",
        )
        holder = report.doomed_holder
        if not self._seen(lambda seen: any(holder in r.message for r in seen.reclaims), deadline):
            return
        pod = system.cp.admin.find("pods", ns, system.doomed.pod)
        report.pod_terminating_at_reclaim = bool(pod and pod["metadata"].get("deletionTimestamp"))

        def burst_done(seen: Observations) -> bool:
            return all(o.exit_code is not None for o in [*report.burst, report.rogue]) and set(
                seen.finished
            ) >= {o.job_id for o in report.burst if o.exit_code == 0}

        orphan = report.orphan_name
        if not self._seen(
            lambda seen: orphan in seen.orphans_flagged and burst_done(seen), deadline
        ):
            return
        done = system.cp.kubectl(OPERATOR_USER, "-n", ns, "delete", "job", orphan, "--wait=false")
        report.operator_deleted_at = timeline.elapsed()
        timeline.emit(
            "operator",
            f"an operator reads the OrphanedFinalizer warning, checks (docs/runbook.md) "
            f"and deletes it: kubectl delete job {orphan} -> "
            f"{(done.stdout or done.stderr).strip()}",
        )

    def _seen(self, condition: Callable[[Observations], bool], deadline: float) -> bool:
        """Wait until ``condition(seen)`` holds (False at ``deadline``): checked again at
        each change the observer sees, and every 0.2 s for the submitters' own."""
        while self.timeline.elapsed() < deadline:
            if self.observer.wait_for(condition, 0.2):
                return True
        return False

    def _sleep_until(self, moment: float) -> None:
        time.sleep(max(0.0, moment - self.timeline.elapsed()))

    def shutdown(self) -> None:
        """Stop every submitter still running (also after Ctrl-C)."""
        self.stop.set()
        for proc in self.processes:
            proc.terminate()
        for thread in [*self.dashboards, self.doomed]:
            if thread.is_alive():
                thread.join(15)
        self.submit_pods.stop()
        self.observer.detach()
