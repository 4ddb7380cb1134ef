"""Which BLAST databases a Job stages or searches, from what ElasticBLAST writes on it.

* ``app=setup`` Jobs stage: env ``ELB_DB`` of their containers (init-ssd per
  node, init-pv, sharded init: one shard name per node), or, for the
  partitioned init that carries no ``ELB_DB``, the basename of
  ``ELB_PARTITION_PREFIX``. The import-queries and cloud-split Jobs stage none.
* ``app=blast`` Jobs search: their ``db`` label, and env ``ELB_DB``.
* ``app=submit`` and ``app=finalizer`` Jobs name no database: a search seen only
  through them has an unknown database.

Names are compared after dropping a path or URL prefix (``…/core_nt`` is
``core_nt``) and surrounding whitespace; otherwise exactly, as on disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elbgate.names import (
    APP_LABEL,
    BLAST_APP,
    DB_ENV,
    DB_LABEL,
    DB_PARTITION_PREFIX_ENV,
    SETUP_APP,
)
from elbgate.pod_template import env_values


def db_key(raw: str) -> str:
    """The comparable name of a database reference (``""`` when there is none)."""
    name = raw.strip().rstrip("/").rsplit("/", 1)[-1]
    return name.strip()


@dataclass(frozen=True, slots=True)
class JobDatabases:
    """The databases one Job stages (writes onto the nodes or the volume) and uses."""

    stages: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    """Every database the Job touches, the staged ones included."""


def _keys(values: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        key = db_key(value)
        if key and key not in out:
            out.append(key)
    return tuple(out)


def job_databases(job: Mapping[str, Any]) -> JobDatabases:
    """The databases of ``job`` (a raw Job dict)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    app = labels.get(APP_LABEL) if isinstance(labels, Mapping) else None
    if app == SETUP_APP:
        staged = _keys(env_values(job, DB_ENV))
        if not staged:
            staged = tuple(k.rstrip("_-.") for k in _keys(env_values(job, DB_PARTITION_PREFIX_ENV)))
        staged = tuple(k for k in staged if k)
        return JobDatabases(staged, staged)
    if app == BLAST_APP:
        label = labels.get(DB_LABEL) if isinstance(labels, Mapping) else None
        named = ((label,) if isinstance(label, str) else ()) + env_values(job, DB_ENV)
        return JobDatabases((), _keys(named))
    return JobDatabases()
