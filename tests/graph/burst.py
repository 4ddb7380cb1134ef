"""A burst of cold ElasticBLAST searches on the control plane, every Job event recorded.

Each search is what ``elastic-blast submit`` creates on AKS with a cold local SSD and
cloud job submission, submitted by a task of one of several submit paths
(:class:`SubmitTask`): it takes the namespace's submit Lease, applies with
``kubectl apply`` — as its user, in ElasticBLAST's order — the ``init-ssd-<id8>-<n>``
Jobs that stage the database on each blast-pool node (``app=setup``, ``ELB_DB``), the
``submit-jobs-<id8>`` Job (``app=submit``) and the finalizer, and releases the Lease.
A search refused at its first Job is tried again after a pause, until it is admitted.

In the cluster (:class:`InCluster`, playing the containers the kubelet stand-in runs):

* the ``submit-jobs`` pod waits until its search's setup Jobs are Complete, then
  creates the search's ``app=blast`` batch Jobs (``db`` = the database, real CPU
  requests: num-cpus 8 → 6 CPU) as the namespace's ``default`` service account with a
  token bound to that pod, trying again while one is refused, and exits;
* the finalizer pod exits once every batch Job of its search is Complete.

Setup and batch pods run ``localkube.elb-gate.io/run-seconds``; the submit and
finalizer pods run until their work is done (the stand-in sets their run time then).
A :class:`~testbed.reliability.histories.JobWatch` records every Job event of the
namespace from a LIST+WATCH, in the API server's order, for :mod:`tests.graph.burst_judge`.
"""

from __future__ import annotations

import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed import elastic_blast as elb
from testbed.api import ApiError, JsonObj
from testbed.controlplane import ControlPlane
from testbed.kubelet_stand_in import RUN_SECONDS
from testbed.reliability import oracle
from testbed.reliability.histories import JobWatch
from testbed.watch import Watch
from tests.graph.burst_judge import Event
from tests.graph.submitter import Submitter, complete

NODES = 3
"""Blast-pool nodes: one init-ssd Job and one batch Job per node and search."""
NUM_CPUS = 8
"""elastic-blast's num-cpus: each batch pod requests 6 CPU (num-cpus - 2)."""
STAGE_SECONDS = 2.0
BATCH_SECONDS = 3.0
RETRY_SECONDS = (1.0, 2.0)
"""A refused search is tried again after a pause in this range."""

_DENIED = re.compile(r"denied the request: ([A-Za-z ]+?):")


def refusal_kind(text: str) -> str:
    """What refused: ``Gate A``, ``Gate B``, ``Capacity``, ``DB staging``… (the words
    before the first colon of the webhook's message), or the whole text."""
    found = _DENIED.search(text)
    return found.group(1) if found else text.strip()


@dataclass(frozen=True)
class Search:
    job_id: str
    db: str

    def submitted(self, namespace: str) -> list[dict[str, Any]]:
        """What the submitter applies, in order."""
        stage = [
            elb.ready(elb.init_ssd(self.job_id, n, self.db), namespace, run_seconds=STAGE_SECONDS)
            for n in range(NODES)
        ]
        return [
            *stage,
            elb.ready(elb.submit_jobs(self.job_id, NODES), namespace),
            elb.ready(elb.finalizer(self.job_id), namespace),
        ]

    def batches(self, namespace: str) -> list[dict[str, Any]]:
        """What its ``submit-jobs`` pod creates."""
        return [
            elb.for_api(
                elb.blast_batch(self.job_id, n, self.db, num_cpus=NUM_CPUS),
                namespace,
                run_seconds=BATCH_SECONDS,
            )
            for n in range(NODES)
        ]


def of(jobs: list[JsonObj], job_id: str, app: str) -> list[JsonObj]:
    """The Jobs of search ``job_id`` labelled ``app``."""
    return [
        j
        for j in jobs
        if oracle.label(j, oracle.JOB_ID) == job_id and oracle.label(j, oracle.APP) == app
    ]


@dataclass
class InCluster:
    """The submit-jobs and finalizer containers of every search in the namespace."""

    cp: ControlPlane
    namespace: str
    searches: dict[str, Search]
    watch: JobWatch
    refusals: list[str] = field(default_factory=list)
    """Why a batch Job created in-cluster was refused (then tried again)."""
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._pods: dict[str, JsonObj] = {}
        self._lock = threading.Lock()
        self._done: set[str] = set()
        self._created: set[str] = set()
        self._tokens: dict[str, str] = {}
        self._stop = threading.Event()
        self._watch = Watch(
            self.cp.admin,
            "pods",
            self._on_pod,
            namespace=self.namespace,
            label_selector="app in (submit,finalizer)",
        )
        self._thread = threading.Thread(target=self._run, name="in-cluster", daemon=True)

    def start(self) -> InCluster:
        self._watch.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
        self._thread.join(10)

    def _on_pod(self, kind: str, pod: JsonObj) -> None:
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(pod["metadata"]["name"], None)
            else:
                self._pods[pod["metadata"]["name"]] = pod

    def _running(self) -> list[JsonObj]:
        with self._lock:
            pods = list(self._pods.values())
        return [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and p["metadata"]["uid"] not in self._done
        ]

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for pod in self._running():
                try:
                    labels = pod["metadata"].get("labels") or {}
                    search = self.searches.get(str(labels.get("elb-job-id")))
                    if search is None:
                        continue
                    finished = (
                        self._submit_jobs(pod, search)
                        if labels.get("app") == "submit"
                        else self._finalize(search)
                    )
                    if finished:
                        self._exit(pod)
                except (ApiError, OSError, KeyError) as exc:
                    self.errors.append(f"{pod['metadata']['name']}: {exc}")

    def _submit_jobs(self, pod: JsonObj, search: Search) -> bool:
        """Once the search's setup Jobs completed: create its batch Jobs. True when all are."""
        setup = of(self.watch.jobs(self.namespace), search.job_id, "setup")
        if len(setup) < NODES or not all(complete(j) for j in setup):
            return False
        as_pod = self.cp.api_for_token(self._token(pod))
        for body in search.batches(self.namespace):
            name = body["metadata"]["name"]
            if name in self._created:
                continue
            try:
                as_pod.create(body)
            except ApiError as exc:
                if exc.status == 409 and exc.reason == "AlreadyExists":
                    self._created.add(name)
                    continue
                if exc.status == 429:
                    self.refusals.append(refusal_kind(exc.message))
                    return False  # the next look tries again
                raise
            self._created.add(name)
        return True

    def _finalize(self, search: Search) -> bool:
        batches = of(self.watch.jobs(self.namespace), search.job_id, "blast")
        return len(batches) == NODES and all(complete(j) for j in batches)

    def _token(self, pod: JsonObj) -> str:
        uid = pod["metadata"]["uid"]
        if uid not in self._tokens:
            self._tokens[uid] = self.cp.pod_token(pod)
        return self._tokens[uid]

    def _exit(self, pod: JsonObj) -> None:
        """The container's work is done: it exits now (0)."""
        self.cp.admin.patch(
            "pods",
            self.namespace,
            pod["metadata"]["name"],
            {"metadata": {"annotations": {RUN_SECONDS: "0"}}},
        )
        self._done.add(pod["metadata"]["uid"])


@dataclass
class Outcome:
    """How one task's search went, as its submitter saw it."""

    admitted_at: float | None = None
    tries: int = 0
    refusals: list[str] = field(default_factory=list)
    """What refused each try (``Capacity``, ``DB staging``…)."""
    printed: list[str] = field(default_factory=list)
    """What kubectl printed for each refused try."""
    errors: list[str] = field(default_factory=list)


class SubmitTask(threading.Thread):
    """One submit path's task for one search: Lease, Jobs in order, release; again
    after a pause while the search is refused at its first Job."""

    def __init__(
        self,
        submitter: Submitter,
        search: Search,
        namespace: str,
        stop: threading.Event,
        start_line: threading.Barrier,
    ) -> None:
        super().__init__(name=f"submit-{search.job_id[-8:]}", daemon=True)
        self.submitter = submitter
        self.search = search
        self.namespace = namespace
        self.stop_event = stop
        self.start_line = start_line
        self.outcome = Outcome()
        self._random = random.Random(search.job_id)

    def run(self) -> None:
        bodies = self.search.submitted(self.namespace)
        self.start_line.wait()
        while not self.stop_event.is_set():
            if not self.submitter.try_acquire():
                self.stop_event.wait(self._random.uniform(0.2, 0.4))  # busy: another submit
                continue
            self.outcome.tries += 1
            try:
                applied = self.submitter.submit(bodies)
            finally:
                self.submitter.release()
            if all(a.ok for a in applied) and len(applied) == len(bodies):
                self.outcome.admitted_at = time.time()
                return
            if len(applied) == 1 and "(TooManyRequests)" in applied[0].stderr:
                self.outcome.refusals.append(refusal_kind(applied[0].stderr))
                self.outcome.printed.append(applied[0].stderr)
                self.stop_event.wait(self._random.uniform(*RETRY_SECONDS))
                continue
            # Refused past the first Job, or refused for a reason waiting cannot cure.
            self.outcome.errors.append(applied[-1].stderr.strip())
            return


@dataclass
class BurstRun:
    """What one burst left to judge."""

    events: list[Event]
    nodes: list[JsonObj]
    tasks: list[SubmitTask]
    in_cluster: InCluster
    started: float
    finished: float

    @property
    def wall_seconds(self) -> float:
        return self.finished - self.started


def run_burst(
    cp: ControlPlane,
    namespace: str,
    searches: list[Search],
    users: list[str],
    workdir: Path,
    *,
    timeout: float,
) -> BurstRun:
    """Submit ``searches`` at once, one task each (users and submit paths taken in
    turn), and wait until every search's finalizer completed (or ``timeout``)."""
    watch = JobWatch(cp.admin, [namespace]).start()
    in_cluster = InCluster(cp, namespace, {s.job_id: s for s in searches}, watch).start()
    stop = threading.Event()
    start_line = threading.Barrier(len(searches))
    tasks = []
    for i, search in enumerate(searches):
        submitter = Submitter(
            cp, namespace, users[i % len(users)], workdir, source=("dashboard", "openapi")[i % 2]
        )
        tasks.append(SubmitTask(submitter, search, namespace, stop, start_line))
    started = time.time()
    finished = started
    try:
        for task in tasks:
            task.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = watch.jobs(namespace)
            finalizers = [of(jobs, s.job_id, "finalizer") for s in searches]
            if all(f and complete(f[0]) for f in finalizers):
                finished = time.time()
                break
            if any(t.outcome.errors for t in tasks) or in_cluster.errors:
                break
            time.sleep(0.5)
        else:
            finished = time.time()
    finally:
        stop.set()
        for task in tasks:
            task.join(30)
            task.submitter.close()
        in_cluster.stop()
        watch.stop()
    events = [Event(seen / 1e9, kind, job) for seen, kind, job in watch.events_of(namespace)]
    return BurstRun(events, cp.admin.list("nodes"), tasks, in_cluster, started, finished)
