"""What a plan asks the applier to do. Each action names the exact object version it was
planned against, so applying it is a CAS: a conflict means "re-observe", never "overwrite"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from elbgate.census import JobRef

ReclaimReason = Literal["expired", "dead_holder"]


@dataclass(frozen=True, slots=True)
class ReleaseLease:
    """Clear the submit Lease's holder (and its holder stamps); keep everything else."""

    namespace: str
    name: str
    resource_version: str
    holder: str
    reason: ReclaimReason
    message: str
    """Why, for the Event and the log: names the holder, its expiry or its pod."""
    evidence: str = ""
    """For ``dead_holder``: the holder-gone case (:data:`controller.holders.GONE_REASONS`)."""
    evidence_since: datetime | None = None
    """When the evidence (or the expiry) became true, if known: the reclaim latency's start."""


@dataclass(frozen=True, slots=True)
class MarkOrphan:
    """Annotate a finalizer the census calls an orphan with ``orphaned-since``."""

    job: JobRef
    since: datetime
    message: str


@dataclass(frozen=True, slots=True)
class UnmarkOrphan:
    """Remove ``orphaned-since`` from a Job that is no longer an orphan."""

    job: JobRef
    message: str


@dataclass(frozen=True, slots=True)
class RecordBatchWork:
    """Annotate a finalizer with ``batch-work-seen`` (and drop a stale orphan mark in the
    same CAS write): its search had batch work, so it is finishing, never an orphan."""

    job: JobRef
    since: datetime
    seen: str
    """``<app>/<name>`` of the batch Job that was seen."""


@dataclass(frozen=True, slots=True)
class DeleteOrphan:
    """Delete an orphan flagged longer than the delete grace (uid + resourceVersion
    preconditions, background propagation)."""

    job: JobRef
    message: str


@dataclass(frozen=True, slots=True)
class WriteLiveness:
    """Create (``resource_version`` ``""``) or CAS-update the liveness ConfigMap."""

    namespace: str
    resource_version: str
    data: Mapping[str, str]
    why: str
    """``changed``, ``created`` or ``heartbeat``."""


Action = ReleaseLease | RecordBatchWork | MarkOrphan | UnmarkOrphan | DeleteOrphan | WriteLiveness
