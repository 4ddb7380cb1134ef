"""How much memory one node needs to search a database: the operator's table, and
what one Job of a search needs from it. Pure.

ElasticBLAST refuses a database bigger than its nodes' memory only after a whole
dispatch cycle (core_nt needs 251.7G; AKS Standard_E16s_v5 nodes have about
120.7Gi allocatable), and a batch pod's request (``ELB_MEM_REQUEST``, 4G) says
nothing of it. So the operator may keep a ConfigMap (``elb-gate-db-memory`` in
elb-gate's namespace) of ``<db>: <memory>`` lines — the memory one node needs to
search the whole database — and the feasibility rule reads a Job's database from
the Job itself (:mod:`elbgate.databases`).

A partitioned or sharded search spreads the database over its nodes, so one node
needs only one part (live: a 10-way sharded core_nt runs where the whole does
not fit):

* a part the table lists by its own name (``core_nt_shard_03: 26G``) needs that;
* otherwise the whole database's need divided by the number of parts: the Job's
  ``ELB_NUM_PARTITIONS`` (the partitioned init), else — for the sharded
  local-SSD layout (``ELB_SHARD_IDX`` env, ``shard`` label), one shard per node,
  pinned by ``nodeSelector ordinal`` — the pool's usable nodes;
* a part whose number of parts is unknown is not judged: the whole database's
  figure would wrongly refuse a search the sharded path runs fine.

Part names follow ElasticBLAST's: ``<db>_shard_<NN>`` (the shard init's
``ELB_DB``), ``<db>_part_<NN>`` / ``part_<NN>/<db>_part_<NN>`` (partitioned
batch Jobs), and the partition prefix ``…/<db>_part_`` or ``…/<db>/part_``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elbgate import quantity
from elbgate.databases import db_key, job_databases
from elbgate.names import DB_PARTITION_PREFIX_ENV
from elbgate.pod_template import env_values

NUM_PARTITIONS_ENV = "ELB_NUM_PARTITIONS"
"""Env of the partitioned init Job: how many parts the database is split into."""
SHARD_INDEX_ENV = "ELB_SHARD_IDX"
"""Env of the sharded init Job: which shard this node stages."""
SHARD_LABEL = "shard"
"""Label of the sharded batch Jobs: the shard (and node ordinal) they search."""

_PART = re.compile(r"^(?P<base>.+?)[_.-](?:shard|part|partition)[_.-]?(?P<index>\d+)$")
_PREFIX_SUFFIX = re.compile(r"[_.-]?(?:shards?|parts?|partitions?)$")


@dataclass(frozen=True, slots=True)
class DbMemoryTable:
    """``db`` → bytes one node needs to search the whole database (operator-kept)."""

    needs: Mapping[str, int]
    problems: tuple[str, ...] = ()
    """Entries that are not ``<db>: <quantity>``, ignored (logged by the reader)."""
    written: Mapping[str, str] = field(default_factory=dict)
    """Each need as the operator wrote it (``251.7G``), for messages."""

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> DbMemoryTable:
        """The table in a ConfigMap's ``data`` (``None``: no ConfigMap, an empty table)."""
        needs: dict[str, int] = {}
        written: dict[str, str] = {}
        problems: list[str] = []
        for raw_db, raw_need in (data or {}).items():
            db = db_key(str(raw_db))
            try:
                need = quantity.bytes_of(str(raw_need).strip())
            except quantity.QuantityError:
                problems.append(f"{raw_db}: {raw_need!r} is not a memory quantity (e.g. 251.7G)")
                continue
            if not db or need <= 0:
                problems.append(f"{raw_db}: {raw_need!r} names no database or no memory")
                continue
            needs[db] = need
            written[db] = str(raw_need).strip()
        return cls(needs, tuple(problems), written)

    def shown(self, db: str) -> str:
        """``251.7G (234.5Gi)``: as written, and in the unit nodes are shown in."""
        binary = quantity.memory_text(self.needs[db], round_up=True)
        raw = self.written.get(db, binary)
        return raw if raw == binary else f"{raw} ({binary})"

    def __bool__(self) -> bool:
        return bool(self.needs)


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """What one pod of a Job needs on one node to search its database."""

    db: str
    """The database as the table names it (the whole one, for a part)."""
    per_node: int
    """Bytes one node needs for this Job's part (the whole database when unpartitioned)."""
    whole: int
    """The table's figure for ``db``."""
    parts: int
    """1 for a whole database; N for one of N parts."""
    parts_from: str = ""
    """Where N came from (``ELB_NUM_PARTITIONS=10``, ``one shard per node on 3 nodes``)."""
    whole_shown: str = ""
    """The table's figure as the operator wrote it."""

    @property
    def text(self) -> str:
        """``database core_nt needs 251.7G (234.5Gi) of memory on one node``, or for a
        part ``one part of database core_nt (251.7G (234.5Gi) in 10 parts: …) needs …``."""
        whole = self.whole_shown or quantity.memory_text(self.whole, round_up=True)
        if self.parts == 1:
            return f"database {self.db} needs {whole} of memory on one node"
        part = quantity.memory_text(self.per_node, round_up=True)
        return (
            f"one part of database {self.db} ({whole} in {self.parts} parts: "
            f"{self.parts_from}) needs {part} of memory on one node"
        )


def _part_of(name: str) -> tuple[str, str] | None:
    """``core_nt_shard_03`` → (``core_nt``, ``03``); ``None`` when not a part's name."""
    match = _PART.match(name)
    return (match["base"], match["index"]) if match else None


def prefix_base(prefix: str) -> str:
    """The database a partition prefix splits: ``…/core_nt_part_`` and ``…/core_nt/part_``
    and ``…/10shards/core_nt_shard_`` all give ``core_nt``."""
    parts = [p for p in prefix.strip().rstrip("/").split("/") if p]
    while parts:
        last = _PREFIX_SUFFIX.sub("", parts.pop().rstrip("_-."))
        if last:
            return last
    return ""


def _count(values: tuple[str, ...]) -> int | None:
    for value in values:
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def memory_need(job: Mapping[str, Any], table: DbMemoryTable, pool_nodes: int) -> MemoryNeed | None:
    """The largest need of the databases ``job`` (a raw Job dict) stages or searches,
    per the table; ``None`` when the table knows none of them (or, for a part, the
    number of parts). ``pool_nodes``: usable nodes of the pool (the sharded layout
    puts one shard on each)."""
    if not table:
        return None
    declared = _count(env_values(job, NUM_PARTITIONS_ENV))
    labels = (job.get("metadata") or {}).get("labels") or {}
    sharded = bool(env_values(job, SHARD_INDEX_ENV)) or (
        isinstance(labels, Mapping) and SHARD_LABEL in labels
    )
    names = list(job_databases(job).uses)
    for prefix in env_values(job, DB_PARTITION_PREFIX_ENV):
        base = prefix_base(prefix)
        if base and declared and not sharded:
            names.append(f"{base}_part_00")  # the partitioned init: judged by one part
    found: list[MemoryNeed] = []
    for name in names:
        part = _part_of(name)
        if part is None and not sharded:
            if name in table.needs:
                need = table.needs[name]
                found.append(MemoryNeed(name, need, need, 1, whole_shown=table.shown(name)))
            continue
        if name in table.needs:  # a part the operator listed by its own name
            listed = table.needs[name]
            found.append(MemoryNeed(name, listed, listed, 1, whole_shown=table.shown(name)))
            continue
        base = part[0] if part else name
        if base not in table.needs:
            continue
        if declared:
            parts, source = declared, f"{NUM_PARTITIONS_ENV}={declared}"
        elif sharded and pool_nodes > 0:
            parts, source = pool_nodes, f"one shard per node on {pool_nodes} nodes"
        else:
            continue  # unknown split: never judged by the whole database's figure
        whole = table.needs[base]
        found.append(MemoryNeed(base, -(-whole // parts), whole, parts, source, table.shown(base)))
    return max(found, key=lambda n: n.per_node, default=None)
