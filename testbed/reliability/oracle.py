"""The reliability suite's own count of active searches, independent of elb-gate's census.

Written from the documented definition (docs/design.md, "Census") and from what the
Kubernetes Job controller (batch/v1, 1.37) writes into a Job's status. It imports
nothing from ``elbgate``, ``webhook`` or ``controller`` (``tests/reliability`` checks
that), so a bug in the census cannot hide here by being shared: the observer counts
with this module and with the census after every Job write, and every disagreement is
a finding.

The definition, as documented:

* A *search Job* is a Job labelled ``app`` = ``setup``, ``submit``, ``blast`` or
  ``finalizer``. A search is keyed by its ``elb-job-id`` label; a search Job without
  one is a search of its own, keyed ``<app>/<name>`` (unknown work is never counted as
  no work) — except a ``setup`` Job without one (warm-reuse ``import-queries``), which
  belongs to the Lease holder's submit in progress and is no search.
* A search is *active* when it has an unfinished ``setup``/``submit``/``blast`` Job, or
  an unfinished finalizer that is *live*: an unfinished work Job of its search exists,
  or the finalizer is younger than the finalizer grace, or its age is unknown.
* A Job is *finished* (it will run no pod any more), as the Job controller writes it:

  - a ``Complete`` or ``Failed`` condition with status ``True``, or ``completionTime``:
    finished;
  - pods still terminating (``status.terminating`` > 0): not finished, whatever else
    is written (since 1.31 the controller writes the final condition only after its
    pods are gone, and until then they run and hold their node);
  - ``SuccessCriteriaMet`` or ``FailureTarget`` ``True``: the outcome is decided:
    finished (once nothing terminates);
  - otherwise by the succeeded count: a Job needs ``spec.completions`` successes (1
    when neither completions nor parallelism is set); a work-queue Job (parallelism
    above 1, no completions) is done when a pod succeeded and none is active. A failed
    pod alone never finishes a Job (the controller retries up to ``backoffLimit``),
    and a suspended Job is not finished (it resumes without passing a gate).

:func:`crude_bound` is a second, deliberately cruder count reported beside it: the
distinct search keys of search Jobs that carry no ``True`` ``Complete``/``Failed``
condition, finalizers counted whatever their age. Every Job the oracle calls unfinished
is unfinished for the bound too, so the bound is never below the oracle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

SEARCH_APPS = frozenset({"setup", "submit", "blast", "finalizer"})
FINALIZER = "finalizer"
SETUP = "setup"
APP = "app"
JOB_ID = "elb-job-id"
FINAL_CONDITIONS = frozenset({"Complete", "Failed"})
DECIDED_CONDITIONS = frozenset({"SuccessCriteriaMet", "FailureTarget"})

Job = Mapping[str, Any]


def _positive(value: object) -> int:
    """A status counter as the API writes it: a positive int, else 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(value, 0)


def _part(job: Job, key: str) -> Mapping[str, Any]:
    """``metadata``, ``spec`` or ``status`` of a Job, ``{}`` when it is not an object."""
    part = job.get(key)
    return part if isinstance(part, Mapping) else {}


def _conditions_true(job: Job) -> set[str]:
    conditions = _part(job, "status").get("conditions")
    out: set[str] = set()
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("status") == "True":
            out.add(str(condition.get("type")))
    return out


def _spec_int(job: Job, key: str) -> int | None:
    value = _part(job, "spec").get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def finished(job: Job) -> bool:
    """Whether the Job will run no pod any more (see the module docstring)."""
    status = _part(job, "status")
    conditions = _conditions_true(job)
    if conditions & FINAL_CONDITIONS or status.get("completionTime"):
        return True
    if _positive(status.get("terminating")):
        return False
    if conditions & DECIDED_CONDITIONS:
        return True
    succeeded = _positive(status.get("succeeded"))
    completions = _spec_int(job, "completions")
    if completions is not None:
        return succeeded >= max(completions, 1)
    parallelism = _spec_int(job, "parallelism")
    if parallelism is not None and parallelism > 1:
        return succeeded > 0 and _positive(status.get("active")) == 0
    return succeeded >= 1


def label(job: Job, key: str) -> str:
    """The label ``key`` of a Job (or of any object), ``""`` when it has none."""
    labels = _part(job, "metadata").get("labels")
    value = labels.get(key) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else ""


def job_name(job: Job) -> str:
    """``metadata.name``, ``""`` when absent."""
    return str(_part(job, "metadata").get("name") or "")


def search_key(job: Job) -> str | None:
    """The search a search Job belongs to; ``None`` for a non-search Job and for a
    setup Job without ``elb-job-id`` (part of the holder's submit, no search)."""
    app = label(job, APP)
    if app not in SEARCH_APPS:
        return None
    job_id = label(job, JOB_ID)
    if job_id:
        return job_id
    if app == SETUP:
        return None
    return f"{app}/{job_name(job)}"


def created_at(job: Job) -> datetime | None:
    """``metadata.creationTimestamp`` (RFC 3339, seconds), ``None`` when absent or unreadable."""
    raw = _part(job, "metadata").get("creationTimestamp")
    if not isinstance(raw, str) or not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Active:
    """One active search: its key, why it counts, and the Jobs that make it so."""

    key: str
    why: str
    jobs: tuple[str, ...]
    """Names of the search's unfinished Jobs."""


def active_searches(jobs: Iterable[Job], now: datetime, grace_seconds: float) -> list[Active]:
    """The active searches among ``jobs`` (every Job of a namespace, any kind or state),
    sorted by key."""
    work: dict[str, list[str]] = {}
    finalizers: dict[str, list[Job]] = {}
    for job in jobs:
        key = search_key(job)
        if key is None or finished(job):
            continue
        if label(job, APP) == FINALIZER:
            finalizers.setdefault(key, []).append(job)
        else:
            work.setdefault(key, []).append(job_name(job))
    out = {
        key: Active(
            key,
            "unfinished " + ", ".join(sorted(names)),
            tuple(sorted(names + [job_name(f) for f in finalizers.get(key, [])])),
        )
        for key, names in work.items()
    }
    for key, found in finalizers.items():
        if key in out:
            continue
        for finalizer in found:
            born = created_at(finalizer)
            if born is None:
                why = f"finalizer {job_name(finalizer)} of unknown age"
            elif (now - born).total_seconds() < grace_seconds:
                why = f"finalizer {job_name(finalizer)} younger than the grace"
            else:
                continue
            out[key] = Active(key, why, tuple(sorted(job_name(f) for f in found)))
            break
    return [out[k] for k in sorted(out)]


def crude_bound(jobs: Iterable[Job]) -> set[str]:
    """Search keys of search Jobs without a ``True`` ``Complete``/``Failed`` condition."""
    keys: set[str] = set()
    for job in jobs:
        key = search_key(job)
        if key is not None and not _conditions_true(job) & FINAL_CONDITIONS:
            keys.add(key)
    return keys
