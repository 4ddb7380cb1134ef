"""Orphaned finalizers: flag, warn, and (policy ``delete``) delete after a further grace.

An orphan is what the shared census calls one (non-terminal finalizer, no live companion,
older than the finalizer grace, and no batch work ever seen for its search: a finalizer
whose search had batch work — recorded on it as ``elb-gate.io/batch-work-seen`` — is
*finishing*, merging results, and is never marked or deleted).

Policy ``warn`` (the default) marks, warns and counts, and leaves the deletion to an
operator; ``delete`` also deletes an orphan once it has been marked for the delete grace.
The mark ``elb-gate.io/orphaned-since`` is the clock of that grace, so it survives
controller restarts and leader changes. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from controller.actions import Action, DeleteOrphan, MarkOrphan, UnmarkOrphan
from elbgate.census import Census, JobRef
from elbgate.durations import format_duration
from elbgate.lease import format_microtime, parse_microtime
from elbgate.settings import ControllerSettings, GateSettings


def _describe(job: JobRef) -> str:
    return f"finalizer Job {job.name}" + (f" (elb-job-id={job.job_id})" if job.job_id else "")


def plan_orphans(
    census: Census,
    marked: Iterable[JobRef],
    now: datetime,
    gate: GateSettings,
    controller: ControllerSettings,
) -> list[Action]:
    """Actions for every orphan (mark, or delete once due) and for every marked Job that
    is no longer an orphan (unmark). ``marked`` is every cached Job carrying the mark,
    finished ones included."""
    actions: list[Action] = []
    orphan_names = {job.name for job in census.orphans}
    grace = int(gate.finalizer_grace_seconds)
    delete_after = controller.orphan_delete_after_seconds
    for job in census.orphans:
        since = parse_microtime(job.orphaned_since) if job.orphaned_since else None
        if not isinstance(since, datetime):
            # Absent, or unparseable (then restart the clock: later deletion, never earlier).
            then = (
                f"it will be deleted after {format_duration(delete_after)} unless its batch work "
                "appears"
                if controller.orphan_policy == "delete"
                else "policy warn: it will not be deleted; an operator deletes it after "
                "checking (docs/runbook.md#elbgateorphanedfinalizers)"
            )
            actions.append(
                MarkOrphan(
                    job=job,
                    since=now,
                    message=(
                        f"{_describe(job)} is orphaned: not finished, no submit/blast/setup "
                        "Job ever seen for its search, and older than the "
                        f"{format_duration(grace)} finalizer grace; it holds no search slot; "
                        f"{then}"
                    ),
                )
            )
        elif controller.orphan_policy == "delete" and not job.batch_work_seen:
            flagged = (now - since).total_seconds()
            if flagged >= delete_after:
                actions.append(
                    DeleteOrphan(
                        job=job,
                        message=(
                            f"deleted orphaned {_describe(job)}: orphaned since "
                            f"{format_microtime(since)} ({format_duration(flagged)} >= "
                            f"{format_duration(delete_after)}, policy delete)"
                        ),
                    )
                )
    for job in marked:
        if job.orphaned_since and job.name not in orphan_names:
            actions.append(
                UnmarkOrphan(
                    job=job,
                    message=f"{_describe(job)} is no longer orphaned; mark removed",
                )
            )
    return actions
