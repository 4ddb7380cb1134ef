"""A Job's status read the way the Kubernetes Job controller writes it (batch/v1, 1.30 to 1.37).

What the controller writes, and what elb-gate concludes:

* ``Complete`` / ``Failed`` condition True, or ``completionTime``: finished. Since
  1.31 the controller writes these only once no pod of the Job is terminating.
* ``SuccessCriteriaMet`` / ``FailureTarget`` True: the outcome is decided, but the
  controller is still removing pods. Finished once ``status.terminating`` is 0 (or
  absent); while pods terminate they still run and hold their node, so the Job
  still counts.
* ``succeeded``: pods that succeeded. It finishes the Job only when it reaches the
  Job's completions (``spec.completions``, 1 when neither completions nor
  parallelism is set). A work-queue Job (parallelism without completions) is done
  when a pod succeeded and none is active any more. A bare ``failed > 0`` never
  finishes a Job: the controller retries up to ``backoffLimit``.
* ``Suspended`` True: no pods run, but the Job is not finished: it resumes by an
  UPDATE of ``spec.suspend`` that no gate sees, so it keeps its search's slot.

For a plain ElasticBLAST Job (one pod, no completions set) this is the test the
existing submit-path clients use: ``succeeded > 0``, ``completionTime``, or a
``Complete``/``Failed`` condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FINISHED_CONDITIONS = frozenset({"Complete", "Failed"})
DECIDED_CONDITIONS = frozenset({"SuccessCriteriaMet", "FailureTarget"})
SUSPENDED_CONDITION = "Suspended"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def true_conditions(job: Mapping[str, Any]) -> frozenset[str]:
    """Types of the Job's conditions whose status is ``"True"``."""
    status = job.get("status") or {}
    return frozenset(
        str(cond.get("type"))
        for cond in status.get("conditions") or ()
        if isinstance(cond, Mapping) and cond.get("status") == "True"
    )


def required_completions(job: Mapping[str, Any]) -> int | None:
    """Succeeded pods the Job needs; ``None`` for a work-queue Job (parallelism
    set, completions not), which is done when any pod succeeded and none is left."""
    spec = job.get("spec") or {}
    completions = spec.get("completions")
    if isinstance(completions, int) and not isinstance(completions, bool):
        return max(completions, 1)
    parallelism = spec.get("parallelism")
    if isinstance(parallelism, int) and not isinstance(parallelism, bool) and parallelism > 1:
        return None
    return 1  # the API server's default when neither is set


def terminating_pods(job: Mapping[str, Any]) -> int:
    """``status.terminating``: pods with a deletionTimestamp still running."""
    return _count((job.get("status") or {}).get("terminating"))


def is_suspended(job: Mapping[str, Any]) -> bool:
    """The Job is suspended (condition ``Suspended`` True, or ``spec.suspend``)."""
    return (
        SUSPENDED_CONDITION in true_conditions(job)
        or (job.get("spec") or {}).get("suspend") is True
    )


def is_terminal(job: Mapping[str, Any]) -> bool:
    """The Job is finished: it will run no pod any more and holds nothing."""
    status = job.get("status") or {}
    conditions = true_conditions(job)
    if conditions & FINISHED_CONDITIONS or status.get("completionTime"):
        return True
    if terminating_pods(job):
        return False
    if conditions & DECIDED_CONDITIONS:
        return True
    succeeded = _count(status.get("succeeded"))
    if not succeeded:
        return False
    needed = required_completions(job)
    if needed is None:
        return not _count(status.get("active"))
    return succeeded >= needed


def runs_one_pod(job: Mapping[str, Any]) -> bool:
    """One success finishes it (the shape of every ElasticBLAST Job: completions
    unset or 1). Then ``status.succeeded > 0`` means finished, which is what lets
    the census LIST skip succeeded Jobs (``status.successful=0``)."""
    return required_completions(job) == 1
