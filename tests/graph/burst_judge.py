"""An independent judge of a burst of searches, from the Job events a watch recorded.

Written from the written definition (docs/design.md, "Gate B"; issue 13, "One DB
staging at a time" and "A ceiling the nodes can hold"), not from elb-gate's code: it
imports nothing from ``elbgate``, ``webhook`` or ``controller`` (tests/graph checks
that), and counts active searches with the reliability suite's own oracle
(:mod:`testbed.reliability.oracle`, equally independent).

What it judges, over the whole history (the state only changes at an event, so
judging after each event judges every instant):

* **One staging per database.** A Job *stages* database X when it is an
  ``app=setup`` Job with ``ELB_DB`` = X in a container's env (ElasticBLAST's
  init-ssd/init-pv Jobs); a Job *names* X when it stages X, or is an ``app=blast``
  Job labelled ``db=X`` or with ``ELB_DB`` = X in its env (a batch Job searching X).
  A Job is *live* from its first event until it is finished (the oracle's
  :func:`~testbed.reliability.oracle.finished`: what the Job controller writes) or
  deleted. An *overlap* is an interval in which a live Job of search A stages X
  while a live Job of another search B names X: B would read (or stage) a
  half-copied X. Searches are told apart by ``elb-job-id``; a Job without one is a
  search of its own (``<app>/<name>``).

  Reported beside it, not judged: *search-level* overlaps, where A stages X while a
  search B whose Jobs named X before has any live Job at all — its submit Job before
  its batch Jobs exist, or its finalizer merging results after they finished. Those
  Jobs read no database, and the rule is written about the Jobs that do.
* **The effective ceiling.** Active searches (the oracle's
  :func:`~testbed.reliability.oracle.active_searches`, at the moment of each event)
  never exceed min(``BLAST_MAX_RUN_CONCURRENCY``, what the ready nodes of the pool
  hold): one batch pod per node, so the pool holds, on its tightest node,
  floor(allocatable CPU / the batch pod's CPU request) searches. The pod's request
  is read from the batch Jobs the burst created, as the scheduler reads it: the
  sum of its containers' requests, or its largest init container's if that is
  more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from testbed.reliability import oracle

SETUP = "setup"
BLAST = "blast"
DB_ENV = "ELB_DB"
DB_LABEL = "db"

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Event:
    """One watch event: when it arrived (unix seconds), its type, the Job as sent."""

    at: float
    type: str
    job: Obj


@dataclass(frozen=True)
class Overlap:
    """Search ``stager`` staged ``db`` while ``other`` had a live Job naming it."""

    db: str
    stager: str
    other: str
    start: float
    end: float | None
    """``None``: still overlapping at the last event."""


@dataclass
class Verdict:
    events: int = 0
    effective_ceiling: int = 0
    nodes_hold: int = 0
    pod_cpu_millis: int = 0
    peak_active: int = 0
    peak_at: float = 0.0
    peak_keys: tuple[str, ...] = ()
    over_ceiling: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    overlaps: list[Overlap] = field(default_factory=list)
    search_overlaps: list[Overlap] = field(default_factory=list)
    """Reported, not judged: A staged X while another search that named X before had
    a live Job of any kind."""
    stagings: dict[str, set[str]] = field(default_factory=dict)
    """Database -> the searches seen staging it."""


# -- reading Jobs and Nodes -------------------------------------------------------------


def _pod_spec(job: Obj) -> Mapping[str, Any]:
    spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod = template.get("spec") if isinstance(template, Mapping) else None
    return pod if isinstance(pod, Mapping) else {}


def _containers(job: Obj, key: str) -> list[Mapping[str, Any]]:
    found = _pod_spec(job).get(key)
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def _env(job: Obj, name: str) -> set[str]:
    values = set()
    for container in _containers(job, "initContainers") + _containers(job, "containers"):
        for var in container.get("env") or []:
            if isinstance(var, Mapping) and var.get("name") == name:
                value = str(var.get("value") or "").strip()
                if value:
                    values.add(value)
    return values


def search_of(job: Obj) -> str:
    """The search a Job belongs to: its ``elb-job-id``, else ``<app>/<name>`` (whatever
    its app: unlike :func:`~testbed.reliability.oracle.search_key`, which leaves out
    the Jobs of no search)."""
    job_id = oracle.label(job, oracle.JOB_ID)
    return job_id or f"{oracle.label(job, oracle.APP)}/{oracle.job_name(job)}"


def stages(job: Obj) -> set[str]:
    """The databases a Job stages (a setup Job's ``ELB_DB``)."""
    return _env(job, DB_ENV) if oracle.label(job, oracle.APP) == SETUP else set()


def names(job: Obj) -> set[str]:
    """The databases a Job stages or searches."""
    app = oracle.label(job, oracle.APP)
    if app == SETUP:
        return stages(job)
    if app == BLAST:
        label = oracle.label(job, DB_LABEL).strip()
        return _env(job, DB_ENV) | ({label} if label else set())
    return set()


def cpu_millis(quantity: object) -> int:
    """A Kubernetes CPU quantity (``15740m``, ``6``, ``0.5``) in millicores, rounded up."""
    text = str(quantity).strip()
    if text.endswith("m"):
        return math.ceil(float(text[:-1]))
    return math.ceil(float(text) * 1000)


def _container_cpu(container: Mapping[str, Any]) -> int:
    resources = container.get("resources")
    requests = resources.get("requests") if isinstance(resources, Mapping) else None
    cpu = requests.get("cpu") if isinstance(requests, Mapping) else None
    return cpu_millis(cpu) if cpu is not None else 0


def pod_cpu_request(job: Obj) -> int:
    """What one pod of the Job requests, as the scheduler adds it up (millicores)."""
    running = sum(_container_cpu(c) for c in _containers(job, "containers"))
    init = max((_container_cpu(c) for c in _containers(job, "initContainers")), default=0)
    return max(running, init)


def _ready(node: Obj) -> bool:
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions or []
    )


def nodes_hold(nodes: Iterable[Obj], pool: Mapping[str, str], pod_cpu: int) -> int:
    """Searches the pool's ready nodes hold with one ``pod_cpu`` pod per node each: the
    tightest node's floor(allocatable CPU / pod_cpu)."""
    per_node = []
    for node in nodes:
        if not _ready(node) or any(oracle.label(node, k) != v for k, v in pool.items()):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        per_node.append(cpu_millis(allocatable.get("cpu", "0")) // max(pod_cpu, 1))
    return min(per_node, default=0)


# -- the judgement ----------------------------------------------------------------------


def judge(
    events: Sequence[Event],
    nodes: Iterable[Obj],
    *,
    pool: Mapping[str, str],
    max_run_concurrency: int,
    finalizer_grace_seconds: float,
) -> Verdict:
    """Replay ``events`` (in the order the watch delivered them) and judge both rules."""
    verdict = Verdict(events=len(events))
    batch_cpu = [pod_cpu_request(e.job) for e in events if oracle.label(e.job, oracle.APP) == BLAST]
    verdict.pod_cpu_millis = max(batch_cpu, default=0)
    verdict.nodes_hold = nodes_hold(nodes, pool, verdict.pod_cpu_millis)
    verdict.effective_ceiling = min(max_run_concurrency, verdict.nodes_hold)

    current: dict[str, Obj] = {}
    open_overlaps: dict[tuple[str, str, str], float] = {}
    open_search_overlaps: dict[tuple[str, str, str], float] = {}
    named: dict[str, set[str]] = {}
    """Search -> the databases its Jobs named so far."""
    for event in events:
        name = oracle.job_name(event.job)
        if event.type == "DELETED":
            current.pop(name, None)
        else:
            current[name] = event.job
        named.setdefault(search_of(event.job), set()).update(names(event.job))
        live = [j for j in current.values() if not oracle.finished(j)]
        live_searches = {search_of(j) for j in live}

        now = datetime.fromtimestamp(event.at, UTC)
        active = oracle.active_searches(current.values(), now, finalizer_grace_seconds)
        keys = tuple(a.key for a in active)
        if len(keys) > verdict.peak_active:
            verdict.peak_active, verdict.peak_at, verdict.peak_keys = len(keys), event.at, keys
        if len(keys) > verdict.effective_ceiling:
            verdict.over_ceiling.append((event.at, keys))

        pairs: set[tuple[str, str, str]] = set()
        search_pairs: set[tuple[str, str, str]] = set()
        for stager_job in live:
            for db in stages(stager_job):
                stager = search_of(stager_job)
                verdict.stagings.setdefault(db, set()).add(stager)
                for other_job in live:
                    other = search_of(other_job)
                    if other != stager and db in names(other_job):
                        pairs.add((db, stager, other))
                for other in live_searches - {stager}:
                    if db in named.get(other, ()):
                        search_pairs.add((db, stager, other))
        _track(pairs, open_overlaps, verdict.overlaps, event.at)
        _track(search_pairs, open_search_overlaps, verdict.search_overlaps, event.at)
    for still, found in (
        (open_overlaps, verdict.overlaps),
        (open_search_overlaps, verdict.search_overlaps),
    ):
        found.extend(Overlap(*pair, start, None) for pair, start in still.items())
    return verdict


def _track(
    now: set[tuple[str, str, str]],
    opened: dict[tuple[str, str, str], float],
    closed: list[Overlap],
    at: float,
) -> None:
    """Open the intervals of the pairs that appear at ``at``, close those that ended."""
    for pair in now - opened.keys():
        opened[pair] = at
    for pair in set(opened) - now:
        closed.append(Overlap(*pair, opened.pop(pair), at))
