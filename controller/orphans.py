"""Orphaned finalizers: flag, warn, and (policy ``delete``) delete after a further grace.

An orphan is what the shared census calls one (non-terminal finalizer, no live companion,
older than the finalizer grace, and no batch work ever seen for its search: a finalizer
whose batch Jobs finished is *finishing* — merging results — and is never deleted).
The mark ``elb-gate.io/orphaned-since`` is the clock of the delete grace, so it
survives controller restarts and leader changes. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from controller.actions import Action, DeleteOrphan, MarkOrphan, UnmarkOrphan
from elbgate.census import Census, JobRef
from elbgate.lease import format_microtime, parse_microtime
from elbgate.settings import Settings


def _describe(job: JobRef) -> str:
    return f"finalizer Job {job.name}" + (f" (elb-job-id={job.job_id})" if job.job_id else "")


def plan_orphans(
    census: Census, marked: Iterable[JobRef], now: datetime, settings: Settings
) -> list[Action]:
    """Actions for every orphan (mark, or delete once due) and for every marked Job that
    is no longer an orphan (unmark). ``marked`` is every cached Job carrying the mark,
    finished ones included."""
    actions: list[Action] = []
    orphan_names = {job.name for job in census.orphans}
    grace = int(settings.finalizer_grace_seconds)
    delete_after = settings.orphan_delete_after_seconds
    for job in census.orphans:
        since = parse_microtime(job.orphaned_since) if job.orphaned_since else None
        if not isinstance(since, datetime):
            # Absent, or unparseable (then restart the clock: later deletion, never earlier).
            then = (
                f"it will be deleted after {delete_after}s unless it regains a companion"
                if settings.orphan_policy == "delete"
                else "policy warn: it will not be deleted"
            )
            actions.append(
                MarkOrphan(
                    job=job,
                    since=now,
                    message=(
                        f"{_describe(job)} is orphaned: not finished, no submit/blast Job "
                        f"ever seen for its search, and older than the {grace}s "
                        f"finalizer grace; it holds no search slot; {then}"
                    ),
                )
            )
        elif settings.orphan_policy == "delete":
            flagged = (now - since).total_seconds()
            if flagged >= delete_after:
                actions.append(
                    DeleteOrphan(
                        job=job,
                        message=(
                            f"deleted orphaned {_describe(job)}: orphaned since "
                            f"{format_microtime(since)} ({int(flagged)}s >= {delete_after}s, "
                            f"policy delete)"
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
