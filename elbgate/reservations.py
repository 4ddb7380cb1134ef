"""The admission record: the search Jobs elb-gate admitted that a census LIST may not
show yet. Pure; the webhook reads and writes it (:mod:`webhook.admission_record`).

Gate B and the one-staging rule decide on the namespace's state, and two requests
judged side by side on one observation would both pass. So every admission that adds
something a later decision reads — a search opened, a database staged, a database a
search now uses — is ordered through one object, the ConfigMap
``elb-gate-admissions`` in the gated namespace, written with a compare-and-swap on
its resourceVersion (docs/design.md, "Admission is linearizable"):

1. GET the record (a consistent read), then LIST the search Jobs (consistent too),
   then GET each reserved Job the LIST does not show (it may have finished already:
   the census LIST skips succeeded Jobs);
2. decide on the census of the listed Jobs plus the *reserved* ones: each entry is
   the admitted Job as the census would see it, created at its admission, until a
   LIST shows a Job of that name, a GET shows it finished, or the entry expires;
3. when the admitted Job adds a fact (:func:`adds_facts`), PUT the record with the
   resourceVersion read, this Job's entry added and the entries the LIST already
   shows (or that expired) removed; on 409 start again from 1.

An entry is removed only when a consistent read taken before the removing write showed
its Job: unfinished in the LIST, so every later LIST — taken after a later GET — shows
it too until it really finishes or is deleted; or finished, which it stays. No decision
can miss an admitted Job. An entry whose Job
was never stored (another webhook refused it, the create failed) stops counting when it
expires.

The record also keeps, per search, the durable evidence that it had batch work
(``data.batch-work.json``: ``elb-job-id`` → ``<time> <app>/<Job name>``), written when
its first ``setup``/``submit``/``blast`` Job is admitted: what tells a finalizer that
is merging after its batch Jobs were TTL-deleted from an orphan, whether or not a
controller watched at the time (the controller copies it onto the finalizer as
``elb-gate.io/batch-work-seen``). Evidence is dropped only once no unfinished Job of its
search is listed and it is older than the bound the writer gives (twice the Lease TTL:
by then the submit that created the search has ended, so no finalizer of it can come).

It keeps, the same way and for as long, which searches were opened as split shards
(``data.split-searches.json``: ``elb-job-id`` → ``<time> <split holder prefix>``), so
the census, the CLI and the metrics can show a shard as such after its Lease is gone.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from elbgate.census import Census, JobRef
from elbgate.lease import format_microtime, parse_microtime
from elbgate.names import (
    ADMISSION_RECORD_CONFIGMAP,
    ADMISSION_RECORD_KEY,
    BATCH_WORK_EVIDENCE_APPS,
    BATCH_WORK_RECORD_KEY,
    SPLIT_RECORD_KEY,
)


class UnreadableRecord(ValueError):
    """The record's content is not what elb-gate writes (edited by hand?)."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """One admitted Job the census may not show yet."""

    name: str
    app: str
    job_id: str
    stages: tuple[str, ...]
    uses: tuple[str, ...]
    admitted: datetime
    expires: datetime

    def ref(self, namespace: str) -> JobRef:
        """The Job as the census sees it: unfinished, created when it was admitted."""
        return JobRef(
            name=self.name,
            namespace=namespace,
            app=self.app,
            job_id=self.job_id,
            uid="",
            resource_version="",
            created=self.admitted,
            orphaned_since="",
            stages=self.stages,
            uses=self.uses,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.name,
            "app": self.app,
            "elbJobId": self.job_id,
            "stages": list(self.stages),
            "uses": list(self.uses),
            "admitted": format_microtime(self.admitted),
            "expires": format_microtime(self.expires),
        }

    @classmethod
    def from_json(cls, raw: object) -> Reservation:
        if not isinstance(raw, Mapping):
            raise UnreadableRecord("an entry is not an object")
        admitted = parse_microtime(raw.get("admitted"))
        expires = parse_microtime(raw.get("expires"))
        if not isinstance(admitted, datetime) or not isinstance(expires, datetime):
            raise UnreadableRecord("an entry's admitted/expires is not a time")
        stages, uses = raw.get("stages") or [], raw.get("uses") or []
        if not isinstance(stages, list) or not isinstance(uses, list):
            raise UnreadableRecord("an entry's stages/uses is not a list")
        return cls(
            name=str(raw.get("job") or ""),
            app=str(raw.get("app") or ""),
            job_id=str(raw.get("elbJobId") or ""),
            stages=tuple(str(s) for s in stages),
            uses=tuple(str(u) for u in uses),
            admitted=admitted,
            expires=expires,
        )


@dataclass(frozen=True, slots=True)
class AdmissionRecord:
    """The record as read: its entries and the resourceVersion a write must name
    (``""``: the ConfigMap does not exist yet, so a write creates it)."""

    namespace: str
    entries: tuple[Reservation, ...] = ()
    resource_version: str = ""
    batch_work: Mapping[str, str] = field(default_factory=dict)
    """``elb-job-id`` → ``<time> <app>/<Job name>``: searches known to have had batch work."""
    splits: Mapping[str, str] = field(default_factory=dict)
    """``elb-job-id`` → ``<time> <split holder prefix>``: searches opened as split shards."""

    @classmethod
    def from_configmap(cls, namespace: str, obj: Mapping[str, Any] | None) -> AdmissionRecord:
        """Parse the ConfigMap (``None``: absent). Raises :class:`UnreadableRecord`."""
        if obj is None:
            return cls(namespace)
        meta = obj.get("metadata") or {}
        text = (obj.get("data") or {}).get(ADMISSION_RECORD_KEY) or "[]"
        try:
            raw = json.loads(text)
        except ValueError:
            raise UnreadableRecord(f"data.{ADMISSION_RECORD_KEY} is not JSON") from None
        if not isinstance(raw, list):
            raise UnreadableRecord(f"data.{ADMISSION_RECORD_KEY} is not a list")
        entries = tuple(Reservation.from_json(r) for r in raw)
        return cls(
            namespace,
            entries,
            str(meta.get("resourceVersion") or ""),
            batch_work_of(obj, strict=True),
            split_searches_of(obj, strict=True),
        )

    def unlisted(self, listed: Collection[str], now: datetime) -> tuple[Reservation, ...]:
        """The entries in force whose Job is not among the ``listed`` names: not stored
        yet, or stored after the LIST, or finished already (the census LIST skips
        succeeded Jobs; the caller GETs these to tell), or never stored."""
        return tuple(e for e in self.entries if e.expires > now and e.name not in listed)

    def needs_evidence(self, app: str, job_id: str) -> bool:
        """Is ``job_id``'s batch work not recorded yet, and would this Job record it?"""
        return bool(job_id) and app in BATCH_WORK_EVIDENCE_APPS and job_id not in self.batch_work

    def written(
        self,
        admitted: Reservation,
        listed: Collection[str],
        listed_ids: Collection[str],
        now: datetime,
        evidence_seconds: float,
        *,
        reserve: bool = True,
        split: str = "",
    ) -> dict[str, Any]:
        """The ConfigMap to write: ``admitted`` added (unless not ``reserve``: it adds no
        fact, only its search's batch work), its search's batch work recorded when it is
        batch work and its split holder prefix when ``split``, entries listed or expired
        dropped, and evidence (and split marks) dropped of searches none of whose Jobs is
        in ``listed_ids`` that is older than ``evidence_seconds``."""
        # ``listed`` holds the names of Jobs a consistent read showed: unfinished in the
        # LIST, or finished in a GET (a finished Job never counts again).
        kept = [
            e
            for e in self.entries
            if e.expires > now and e.name not in listed and e.name != admitted.name
        ]
        if reserve:
            kept.append(admitted)
        evidence = {
            job_id: value
            for job_id, value in self.batch_work.items()
            if job_id in listed_ids or not _older(value, now, evidence_seconds)
        }
        if self.needs_evidence(admitted.app, admitted.job_id):
            evidence[admitted.job_id] = f"{format_microtime(now)} {admitted.app}/{admitted.name}"
        splits = {
            job_id: value
            for job_id, value in self.splits.items()
            if job_id in listed_ids or not _older(value, now, evidence_seconds)
        }
        if split and admitted.job_id and admitted.job_id not in splits:
            splits[admitted.job_id] = f"{format_microtime(now)} {split}"
        meta: dict[str, Any] = {
            "name": ADMISSION_RECORD_CONFIGMAP,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/managed-by": "elb-gate"},
        }
        if self.resource_version:
            meta["resourceVersion"] = self.resource_version
        data = {
            ADMISSION_RECORD_KEY: json.dumps(
                [e.to_json() for e in kept], separators=(",", ":"), sort_keys=True
            ),
            BATCH_WORK_RECORD_KEY: json.dumps(evidence, separators=(",", ":"), sort_keys=True),
        }
        if splits:
            data[SPLIT_RECORD_KEY] = json.dumps(splits, separators=(",", ":"), sort_keys=True)
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def without_entries(
    namespace: str, obj: Mapping[str, Any] | None, stored: Collection[str]
) -> dict[str, Any] | None:
    """The record's ConfigMap ``obj`` with the entries of the Jobs ``stored`` removed and
    everything else as read (its resourceVersion too, for the compare-and-swap); ``None``
    when it holds none of them. ``stored`` must name Jobs a consistent read showed
    stored: from then on every census LIST shows them while they are unfinished, so
    their entries need not count (and must not outlive them: a Job deleted before the
    next admission reads it would otherwise count until its entry expires)."""
    record = AdmissionRecord.from_configmap(namespace, obj)
    if obj is None or not any(e.name in stored for e in record.entries):
        return None
    kept = [e.to_json() for e in record.entries if e.name not in stored]
    out = dict(obj)
    out["data"] = {
        **(obj.get("data") or {}),
        ADMISSION_RECORD_KEY: json.dumps(kept, separators=(",", ":"), sort_keys=True),
    }
    return out


def _older(value: str, now: datetime, seconds: float) -> bool:
    since = parse_microtime(value.split(" ", 1)[0])
    # Unparseable: kept (dropping evidence could let a running finalizer be collected).
    return isinstance(since, datetime) and (now - since).total_seconds() > seconds


def batch_work_of(obj: Mapping[str, Any] | None, *, strict: bool = False) -> dict[str, str]:
    """The record's batch-work evidence: ``elb-job-id`` → ``<time> <app>/<Job name>``.
    Unreadable content raises :class:`UnreadableRecord` when ``strict`` (the webhook, which
    must not write over it), and is empty otherwise (the controller)."""
    text = ((obj or {}).get("data") or {}).get(BATCH_WORK_RECORD_KEY) or "{}"
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        if strict:
            raise UnreadableRecord(f"data.{BATCH_WORK_RECORD_KEY} is not an object of strings")
        return {}
    return {str(k): v for k, v in raw.items()}


def split_searches_of(obj: Mapping[str, Any] | None, *, strict: bool = False) -> dict[str, str]:
    """The record's split shards: ``elb-job-id`` → ``<time> <split holder prefix>``
    (unreadable: :class:`UnreadableRecord` when ``strict``, else empty, as
    :func:`batch_work_of`)."""
    text = ((obj or {}).get("data") or {}).get(SPLIT_RECORD_KEY) or "{}"
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        if strict:
            raise UnreadableRecord(f"data.{SPLIT_RECORD_KEY} is not an object of strings")
        return {}
    return {str(k): v for k, v in raw.items()}


def reservation_of(
    name: str,
    app: str,
    job_id: str,
    stages: Iterable[str],
    uses: Iterable[str],
    now: datetime,
    seconds: float,
) -> Reservation:
    """The entry for a Job admitted at ``now``, in force for ``seconds``."""
    return Reservation(
        name, app, job_id, tuple(stages), tuple(uses), now, now + timedelta(seconds=seconds)
    )


def facts(seen: Census) -> frozenset[tuple[str, ...]]:
    """What a later decision reads from the census: the active searches, the databases
    being staged and by whom, and the databases each active search uses."""
    out: set[tuple[str, ...]] = {("active", a.key) for a in seen.active}
    out.update(("staging", s.db, s.key) for s in seen.staging)
    out.update(("uses", a.key, db) for a in seen.active for db in a.uses)
    return frozenset(out)


def adds_facts(before: Census, after: Census) -> bool:
    """Does admitting the Job (``after`` = ``before`` with it) change what a later
    decision reads? Only then must the admission be ordered through the record."""
    return not facts(after) <= facts(before)
