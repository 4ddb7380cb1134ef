"""The story, directed: a burst of ten searches through both submit paths, a search whose
batch work never appears, a non-compliant submitter, a holder whose pod dies, an
operator acting on the orphan warning, and the namespace going idle at the end.

The director runs in the main thread and only starts things and waits on conditions;
what happens is seen by the observer (the API server's watches) and by the submitters
(what their clients were told).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from elbgate.names import JOB_ID_LABEL
from testbed.demo.observer import Observations, Observer
from testbed.demo.searches import new_search_id, short
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
    """Everything the summary is made from."""

    seen: Observations
    burst: list[Outcome]
    """The ten searches of the burst."""
    orphan_name: str
    """The finalizer whose batch work never appears."""
    rogue: Outcome
    rogue_jobs_left: int
    doomed_holder: str
    pod_deleted_at: float | None
    pod_terminating_at_reclaim: bool | None
    operator_deleted_at: float | None
    batch_jobs_created: int
    started_at: float
    finished_at: float
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
        job_id = new_search_id()
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
        for n in range(1, SEARCHES_PER_PATH + 1):
            label = f"dashboard-{n}"
            self.dashboards.append(
                DashboardSubmitter(system, label, self._search(label), timeline, self.stop)
            )
            label = f"openapi-{n}"
            self.processes.append(ProcessSubmitter(system, label, self._search(label), timeline))
        timeline.emit(
            "burst",
            f"{2 * SEARCHES_PER_PATH} searches fired at once: {SEARCHES_PER_PATH} via the "
            f"dashboard (Celery task: raw-HTTPS Lease client + kubectl, re-queued after 30 s "
            f"when busy or full), {SEARCHES_PER_PATH} via the OpenAPI service (elb-gate submit)",
        )
        for dash in self.dashboards:
            dash.start()
        for proc in self.processes[1:]:
            proc.start()
        burst = [s.outcome for s in self.dashboards] + [p.outcome for p in self.processes[1:]]

        bad = ProcessSubmitter(
            system, f"{ROGUE_USER} (no Lease)", self._search("rogue"), timeline, rogue=True
        )
        self.processes.append(bad)
        pod_deleted_at: float | None = None
        terminating_at_reclaim: bool | None = None
        operator_at: float | None = None
        deadline = begin + DEADLINE_SECONDS
        orphan_name = f"elb-finalizer-{short(orphan.outcome.job_id)}"

        def burst_done(seen: Observations) -> bool:
            return all(o.exit_code is not None for o in [*burst, bad.outcome]) and set(
                seen.finished
            ) >= {o.job_id for o in burst if o.exit_code == 0}

        while timeline.elapsed() < deadline:
            now = timeline.elapsed() - begin
            seen = self.observer.seen
            if bad.proc is None and now >= ROGUE_AFTER_SECONDS:
                timeline.emit(
                    "rogue",
                    f"a submitter without the Lease runs elastic-blast submit as user {ROGUE_USER}",
                )
                bad.start()
            if self.doomed.ident is None and now >= DOOMED_AFTER_SECONDS:
                self.doomed.start()
            if (
                pod_deleted_at is None
                and self.doomed.acquired_at is not None
                and timeline.elapsed() >= self.doomed.acquired_at + POD_DIES_AFTER_SECONDS
            ):
                system.cp.admin.delete(
                    "pods", ns, system.doomed.pod, grace_seconds=POD_GRACE_SECONDS
                )
                self.doomed.pod_gone.set()
                pod_deleted_at = timeline.elapsed()
                timeline.emit(
                    "pod",
                    f"pod {ns}/{system.doomed.pod} deleted (grace {POD_GRACE_SECONDS} s) while it "
                    "holds the Lease: Terminating, its submitter stops; nothing renews or "
                    "releases",
                )
            if (
                terminating_at_reclaim is None
                and pod_deleted_at is not None
                and any(holder == self.doomed.lease.holder for _, holder in seen.lease_cleared)
            ):
                pod = system.cp.admin.find("pods", ns, system.doomed.pod)
                terminating_at_reclaim = bool(pod and pod["metadata"].get("deletionTimestamp"))
            if (
                operator_at is None
                and orphan_name in seen.orphan_events
                and burst_done(seen)
                and terminating_at_reclaim is not None
            ):
                done = system.cp.kubectl(
                    OPERATOR_USER, "-n", ns, "delete", "job", orphan_name, "--wait=false"
                )
                operator_at = timeline.elapsed()
                timeline.emit(
                    "operator",
                    f"an operator reads the OrphanedFinalizer warning, checks (docs/runbook.md) "
                    f"and deletes it: kubectl delete job {orphan_name} -> "
                    f"{(done.stdout or done.stderr).strip()}",
                )
            if operator_at is not None:
                break
            self.observer.wait_for(lambda _seen: False, 0.2)

        # The last word is the controller's: the namespace must go idle on its own.
        since = operator_at or 0.0
        self.observer.wait_for(
            lambda seen: seen.in_use is False and seen.liveness[-1][0] >= since,
            max(1.0, deadline - timeline.elapsed()),
        )
        self.submit_pods.stop()
        self.observer.detach()
        left = system.cp.admin.list(
            "jobs", ns, label_selector=f"{JOB_ID_LABEL}={bad.outcome.job_id}"
        )
        errors = [*self.submit_pods.errors, *(str(e) for e in self.observer.errors)]
        return Report(
            seen=self.observer.seen,
            burst=burst,
            orphan_name=orphan_name,
            rogue=bad.outcome,
            rogue_jobs_left=len(left),
            doomed_holder=self.doomed.lease.holder,
            pod_deleted_at=pod_deleted_at,
            pod_terminating_at_reclaim=terminating_at_reclaim,
            operator_deleted_at=operator_at,
            batch_jobs_created=self.submit_pods.created,
            started_at=begin,
            finished_at=timeline.elapsed(),
            errors=errors,
        )

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
