"""One staging per database at a time. Pure.

Measured on AKS: searches of one database started together race on the node's
database cache while it is being staged, and fail ("BLAST Database error: No
alias or index file found"; 7 to 8 of a 10-search burst). So, for a Job of
search S (databases read by :mod:`elbgate.databases`):

* a Job that stages X is refused while another search stages X, or another
  active search uses X (re-staging under a running search breaks its reads); an
  active search uses what its unfinished Jobs name and what its finished setup Jobs
  staged (:attr:`elbgate.census.ActiveSearch.uses`), so the window between a cold
  search's staging and its batch Jobs is covered;
* a Job that uses X is refused while another search stages X;
* the first Job of a new search that names no database (the cloud-job-submission
  ``submit`` Job, a finalizer) is refused while any database is being staged by
  another search: elb-gate cannot tell it will not read that one half-copied.

Different databases proceed in parallel. A search whose Jobs seen so far name no
database is not known to use any: its batch Jobs, when they come (they carry
``db``), are judged by the second rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from elbgate.census import Census, Staging

ConflictKind = Literal["staged_twice", "stage_while_used", "use_while_staged", "unknown_db"]


@dataclass(frozen=True, slots=True)
class StagingConflict:
    """Why the Job must wait, with whom it conflicts and on which database."""

    kind: ConflictKind
    dbs: tuple[str, ...]
    others: tuple[str, ...]
    """The other searches' keys (``elb-job-id``, or ``setup/<name>``)."""
    staging_jobs: tuple[str, ...] = ()
    """Names of the unfinished setup Jobs to wait for (empty when waiting for searches)."""


def _stagers(census: Census, own: str, db: str | None = None) -> list[Staging]:
    return [s for s in census.staging if s.key != own and (db is None or s.db == db)]


def _conflict(kind: ConflictKind, stagings: list[Staging]) -> StagingConflict:
    return StagingConflict(
        kind,
        tuple(dict.fromkeys(s.db for s in stagings)),
        tuple(dict.fromkeys(s.key for s in stagings)),
        tuple(dict.fromkeys(j.name for s in stagings for j in s.jobs)),
    )


def staging_conflict(
    own: str,
    stages: tuple[str, ...],
    uses: tuple[str, ...],
    census: Census,
    *,
    opens: bool,
) -> StagingConflict | None:
    """The conflict that keeps a Job of search ``own`` (staging ``stages``, using
    ``uses``; ``opens``: it is its search's first Job) from starting now, if any."""
    for db in stages:
        if stagings := _stagers(census, own, db):
            return _conflict("staged_twice", stagings)
        users = tuple(a.key for a in census.active if a.key != own and db in a.uses)
        if users:
            return StagingConflict("stage_while_used", (db,), users)
    for db in uses:
        if stagings := _stagers(census, own, db):
            return _conflict("use_while_staged", stagings)
    if opens and not uses and (stagings := _stagers(census, own)):
        return _conflict("unknown_db", stagings)
    return None
