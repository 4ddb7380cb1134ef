"""The three admission handlers: read what a policy needs, decide, answer.

Each handler is ``AdmissionRequest -> Answer`` with no HTTP inside; the HTTP
layer (:mod:`webhook.endpoint`) counts, times and logs every answer the same way.
The reads are uncached, each under ``webhook.api_timeout_seconds``; a failed
or late read is a 503 denial naming what could not be verified (fail-closed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from elbgate.census import CensusMemo, JobRef, census
from elbgate.identities import SubmitterIdentities
from elbgate.kube.api import JOBS, ApiError, ApiUnavailable, KubeApi, path
from elbgate.kube.reads import get_submit_lease, list_unfinished_search_jobs
from elbgate.names import JOB_ID_LABEL, lease_name
from elbgate.reservations import (
    AdmissionRecord,
    UnreadableRecord,
    adds_facts,
    reservation_of,
    without_entries,
)
from elbgate.settings import GateSettings, RuleSettings, WebhookSettings
from elbgate.turns import TurnRecord, TurnRules, UnreadableTurns, judge
from webhook import fair_turn, lease_guard, lease_stamp, search_admission
from webhook.admission_record import (
    RecordChanged,
    finished_jobs,
    get_record,
    get_turns,
    record_ref,
    write_record,
    write_turns,
)
from webhook.census_watch import CensusWatch
from webhook.decision import Answer, Decision, unverified
from webhook.lease_request import LeaseRequest
from webhook.metrics import LEASE_GUARD, LEASE_STAMP, SEARCH_ADMISSION, WebhookMetrics
from webhook.node_rules import NodesSeen
from webhook.review import AdmissionRequest
from webhook.search_admission import JobRequest, Observed, Reads, node_rules_on

RECORD_ATTEMPTS = 5
"""Reads and decisions per request when other admissions keep writing the record first;
then 503 (fail-closed). Each lost attempt means another search Job was admitted."""

_log = logging.getLogger("webhook.admission")


def utc_now() -> datetime:
    return datetime.now(UTC)


class ReadFailed(Exception):
    """An API read needed for a decision failed; the message names the read and why."""


@dataclass(frozen=True, slots=True)
class Listed:
    """What the census LIST showed, and what became of the record's reserved Jobs."""

    jobs: list[dict[str, Any]]
    names: frozenset[str]
    ids: frozenset[str]
    """The ``elb-job-id`` of every listed Job."""
    pending: tuple[JobRef, ...]
    """Reserved Jobs to count: not listed, not seen finished."""
    finished: frozenset[str]
    """Reserved Jobs a GET showed finished (their entries can go)."""


CONFIRM_FIRST_PAUSE_SECONDS = 0.2
CONFIRM_MAX_PAUSE_SECONDS = 5.0
"""How often the admitting replica looks for an admitted Job to confirm it stored."""
CONFIRM_WITHIN_SECONDS = 60.0
"""The API server's request timeout: an admitted create not stored by then never is."""


@dataclass
class Admission:
    """Everything the handlers need, passed explicitly."""

    gate: GateSettings
    webhook: WebhookSettings
    rules: RuleSettings
    api: KubeApi
    metrics: WebhookMetrics
    identities: SubmitterIdentities = field(default_factory=SubmitterIdentities)
    clock: Callable[[], datetime] = utc_now
    on_api_answer: Callable[[], None] = lambda: None
    """Told whenever the API answered (readiness uses it as a free probe)."""
    on_api_unavailable: Callable[[str], None] = lambda _error: None
    """Told whenever a read got no answer (readiness then probes at once)."""
    census_watch: CensusWatch | None = None
    """``ELB_GATE_CENSUS_READ=watch``: the census from this replica's Job watch, at a
    fence; ``None`` (or whenever it cannot say): the census LIST."""
    nodes: Callable[[], NodesSeen] | None = None
    """The Node watch cache's view (:meth:`webhook.cluster_view.ClusterView.seen`);
    read only while a node rule is on. No API call."""
    census_memo: CensusMemo = field(default_factory=CensusMemo, init=False, repr=False)
    """Each census Job version read once: the census of the same Jobs again (the next
    admission's, the same one's with its new Job) reads only what changed."""
    _confirming: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)

    async def close(self) -> None:
        """Stop confirming reserved Jobs (their entries then expire on their own)."""
        for task in list(self._confirming):
            task.cancel()
        await asyncio.gather(*self._confirming, return_exceptions=True)

    # -- handlers ------------------------------------------------------------

    async def validate_job(self, request: AdmissionRequest) -> Answer:
        """``/validate/jobs``: Gate A + Gate B on search Jobs."""
        return await self._answer(SEARCH_ADMISSION, request, self._judge_job, warn=True)

    async def mutate_lease(self, request: AdmissionRequest) -> Answer:
        """``/mutate/leases``: stamp holder-user/holder-pod and the webhook's clock."""
        return await self._answer(LEASE_STAMP, request, self._stamp_lease, warn=False)

    async def validate_lease(self, request: AdmissionRequest) -> Answer:
        """``/validate/leases``: the Lease guard (always enforcing, see docs/denials.md)."""
        return await self._answer(LEASE_GUARD, request, self._guard_lease, warn=False)

    async def _stamp_lease(self, request: AdmissionRequest) -> Decision:
        return lease_stamp.decide(LeaseRequest.from_admission(request), self.clock())

    async def _guard_lease(self, request: AdmissionRequest) -> Decision:
        lease = LeaseRequest.from_admission(request)
        decision = lease_guard.decide(lease, self.gate, self.webhook, self.clock(), self.identities)
        if self.webhook.fair_turns != "on":
            return decision
        path_name = fair_turn.path_of(lease, decision, self.identities)
        if path_name is None:
            return decision
        return await self._fair_turn(lease, decision, path_name, request.dry_run)

    async def _fair_turn(
        self, lease: LeaseRequest, decision: Decision, path_name: str, dry_run: bool
    ) -> Decision:
        """The guard admitted an acquisition of a free turn's Lease by ``path_name``: give
        the turn to the path that waited longest (:mod:`elbgate.turns`). Fairness is not
        safety: when its record or the census cannot be read, or other replicas keep
        writing the record first, the guard's admit stands."""
        rules = TurnRules(
            self.webhook.fair_turn_hold_seconds, self.webhook.fair_turn_forget_seconds
        )
        deadline = self.webhook.api_timeout_seconds
        for _ in range(RECORD_ATTEMPTS):
            now = self.clock()
            try:
                record = TurnRecord.from_configmap(
                    lease.namespace,
                    await self._read(
                        f"GET ConfigMap {lease.namespace}/elb-gate-turns",
                        "get",
                        "configmaps",
                        get_turns(self.api, lease.namespace, deadline),
                    ),
                )
                slots = await self._slots(lease.namespace, now, fence=not dry_run)
            except (ReadFailed, UnreadableTurns, UnreadableRecord) as exc:
                _log.warning("fair turn not judged for Lease %s: %s", lease.ref, exc)
                return decision
            judged = judge(record, path_name, now, slots[0] < slots[1], rules, lease.old_version)
            if judged.write is not None and not dry_run:
                try:
                    await self._read(
                        f"write ConfigMap {lease.namespace}/elb-gate-turns",
                        "update" if record.resource_version else "create",
                        "configmaps",
                        write_turns(self.api, judged.write.body(), deadline),
                    )
                except RecordChanged:
                    continue
                except ReadFailed as exc:
                    _log.warning("fair turn record of %s not written: %s", lease.ref, exc)
            return fair_turn.answer(lease, decision, path_name, judged, now, slots)
        return decision

    async def _slots(self, namespace: str, now: datetime, *, fence: bool) -> tuple[int, int]:
        """The active searches by Gate B's census (the admission record's reserved Jobs
        counted) and the ceiling: a search slot is free while the first is below."""
        record = AdmissionRecord.from_configmap(
            namespace,
            await self._read(
                f"GET {record_ref(namespace)}",
                "get",
                "configmaps",
                get_record(self.api, namespace, self.webhook.api_timeout_seconds),
            ),
        )
        jobs = await self._list_jobs(namespace, fence=fence)
        listed = await self._listed(namespace, jobs, now, record)
        counted = census(
            jobs,
            now,
            self.gate.finalizer_grace_seconds,
            reserved=listed.pending,
            memo=self.census_memo,
        )
        return counted.count, self.gate.max_run_concurrency

    # -- search admission reads ----------------------------------------------

    async def _judge_job(self, request: AdmissionRequest) -> Decision:
        job = JobRequest.from_admission(request)
        reads = search_admission.reads_needed(job)
        if reads in (Reads.NONE, Reads.LEASE):
            # Decided on the request or the Lease alone: it adds nothing to the census.
            now = self.clock()
            try:
                observed, _ = await self._observe(job, reads, now, None, fence=False)
            except ReadFailed as exc:
                return unverified(f"Gate A/B for {job.ref}", str(exc))
            return self._as_answered(job, observed, self._decide(job, observed, now))
        for _ in range(RECORD_ATTEMPTS):
            judged = await self._judge_in_order(job, reads, request.dry_run)
            if judged is not None:
                return judged
        return unverified(
            f"Gate A/B for {job.ref}",
            f"{record_ref(job.namespace)} was changed by {RECORD_ATTEMPTS} other admissions "
            "in a row while this one was decided",
        )

    async def _judge_in_order(
        self, job: JobRequest, reads: Reads, dry_run: bool
    ) -> Decision | None:
        """One attempt: read the admission record, then the census; decide; write the
        record if the admitted Job adds a fact. ``None``: the record changed, try again."""
        now = self.clock()
        subject = f"Gate A/B for {job.ref}"
        try:
            record = AdmissionRecord.from_configmap(
                job.namespace,
                await self._read(
                    f"GET {record_ref(job.namespace)}",
                    "get",
                    "configmaps",
                    get_record(self.api, job.namespace, self.webhook.api_timeout_seconds),
                ),
            )
            # After the record's GET, never beside it: see elbgate.reservations.
            observed, listed = await self._observe(job, reads, now, record, fence=not dry_run)
        except ReadFailed as exc:
            return unverified(subject, str(exc))
        except UnreadableRecord as exc:
            return unverified(
                subject,
                f"{record_ref(job.namespace)} is not what elb-gate writes: {exc}; delete it "
                "and the webhook writes it anew",
            )
        decision = self._decide(job, observed, now, record.splits)
        if not decision.allowed or dry_run:
            return self._as_answered(job, observed, decision)
        assert listed is not None and observed.census is not None
        after = search_admission.survey(
            job,
            listed.jobs,
            self.gate,
            now,
            (*listed.pending, search_admission.as_unfinished(job, now)),
            self.census_memo,
        )
        adds = adds_facts(observed.census, after)
        seen = listed.names | listed.finished
        if not adds and not record.needs_evidence(job.app, job.job_id):
            if any(e.name in seen for e in record.entries):
                # Tidy: drop the entries this admission's reads showed (best effort; the
                # decision stands whatever becomes of it), so none counts again once its
                # Job has ended and gone before the next admission that writes.
                await self._prune(job, record, listed, now)
            return self._as_answered(job, observed, decision)
        entry = reservation_of(
            job.name,
            job.app,
            job.job_id,
            job.stages,
            job.uses,
            now,
            self.webhook.admission_reservation_seconds,
        )
        try:
            await self._read(
                f"write {record_ref(job.namespace)}",
                "update" if record.resource_version else "create",
                "configmaps",
                write_record(
                    self.api,
                    record.written(
                        entry,
                        listed.names | listed.finished,
                        listed.ids,
                        now,
                        2 * self.gate.lease_ttl_seconds,
                        reserve=adds,
                        split=str(decision.details.get("split") or ""),
                    ),
                    self.webhook.api_timeout_seconds,
                ),
            )
        except RecordChanged:
            return None
        except ReadFailed as exc:
            return unverified(subject, str(exc))
        answered = self._as_answered(job, observed, decision)
        if adds and answered.allowed:
            task = asyncio.create_task(self._confirm_stored(job.namespace, job.name))
            self._confirming.add(task)
            task.add_done_callback(self._confirming.discard)
        return answered

    async def _confirm_stored(self, namespace: str, name: str) -> None:
        """Once a GET shows the admitted Job stored, drop its entry from the record: from
        then on the census LIST counts it while it runs. Without this an entry outlives a
        Job that ran and was deleted (TTL) before any other admission read it, and a
        search that has ended holds a slot until the entry expires. Best effort: while
        the Job is not seen, or the API is away, the entry stays and expires as before."""
        loop = asyncio.get_running_loop()
        ends = loop.time() + min(self.webhook.admission_reservation_seconds, CONFIRM_WITHIN_SECONDS)
        pause = CONFIRM_FIRST_PAUSE_SECONDS
        deadline = self.webhook.api_timeout_seconds
        while loop.time() < ends:
            await asyncio.sleep(pause)
            pause = min(pause * 2, CONFIRM_MAX_PAUSE_SECONDS)
            try:
                if await self.api.get_or_none(path(JOBS, namespace, name), deadline=deadline):
                    for _ in range(RECORD_ATTEMPTS):
                        body = without_entries(
                            namespace, await get_record(self.api, namespace, deadline), {name}
                        )
                        if body is None:
                            return
                        try:
                            await write_record(self.api, body, deadline)
                            return
                        except RecordChanged:
                            continue
                    return
            except (ApiError, ApiUnavailable, UnreadableRecord):
                continue

    async def _prune(
        self, job: JobRequest, record: AdmissionRecord, listed: Listed, now: datetime
    ) -> None:
        # An entry that names no Job, added to nothing: only the pruning is written.
        entry = reservation_of("", "", "", (), (), now, 0)
        body = record.written(
            entry,
            listed.names | listed.finished,
            listed.ids,
            now,
            2 * self.gate.lease_ttl_seconds,
            reserve=False,
        )
        try:
            await write_record(self.api, body, self.webhook.api_timeout_seconds)
        except (RecordChanged, ApiError, ApiUnavailable):
            pass  # another admission wrote (and pruned) first, or the API is away

    def _as_answered(self, job: JobRequest, observed: Observed, decision: Decision) -> Decision:
        """An admission decided again, on the same reads, on the clock as the webhook
        answers (no API call). The first decision took its clock before the census LIST
        and the admission record's write: a hold that expired meanwhile must not admit,
        since from its expiry on the Lease guard admits a takeover and the Job could
        commit under the next holder. A refusal here after the record was written leaves
        its entry to expire, as one whose Job never came: it counts a slot for a while, it
        never frees one."""
        if not decision.allowed:
            return decision
        late = search_admission.decide(
            job, self._with_nodes(observed), self.gate, self.rules, self.clock(), self.identities
        )
        return decision if late.allowed else late

    def _with_nodes(self, observed: Observed) -> Observed:
        """``observed`` with the Node watch cache's view, when a node rule reads it."""
        if observed.census is not None and node_rules_on(self.rules):
            seen = self.nodes() if self.nodes else NodesSeen(None, "no Node watch is running")
            return replace(observed, nodes=seen)
        return observed

    def _decide(
        self,
        job: JobRequest,
        observed: Observed,
        now: datetime,
        splits: Mapping[str, str] | None = None,
    ) -> Decision:
        """``splits``: the admission record's split shards, when it was read."""
        observed = self._with_nodes(observed)
        decision = search_admission.decide(
            job, observed, self.gate, self.rules, now, self.identities
        )
        if observed.census is not None:
            ceiling = (
                self.gate.max_run_concurrency if decision.ceiling is None else decision.ceiling
            )
            self.metrics.record_census(job.namespace, observed.census.count, ceiling)
            if splits is not None:
                shards = set(splits) & set(observed.census.active_ids)
                self.metrics.record_split_searches(job.namespace, len(shards))
        return decision

    async def _observe(
        self,
        job: JobRequest,
        reads: Reads,
        now: datetime,
        record: AdmissionRecord | None,
        *,
        fence: bool,
    ) -> tuple[Observed, Listed | None]:
        """What ``decide`` needs, and what was listed (``None`` when nothing was). With a
        ``record``, the census counts its reserved Jobs that the LIST does not show and
        a GET does not show finished."""
        if reads is Reads.NONE:
            return Observed(), None
        if reads is Reads.LEASE:
            return Observed(None, await self._get_lease(job.namespace)), None
        if reads is Reads.JOBS_AND_LEASE:
            results = await asyncio.gather(
                self._list_jobs(job.namespace, fence=fence),
                self._get_lease(job.namespace),
                return_exceptions=True,
            )
            failures = [r for r in results if isinstance(r, BaseException)]
            for failure in failures:
                if not isinstance(failure, ReadFailed):
                    raise failure
            if failures:
                raise ReadFailed("; ".join(str(f) for f in failures))
            jobs, lease_obj = results
            listed = await self._listed(job.namespace, jobs, now, record)
            seen = search_admission.survey(
                job, jobs, self.gate, now, listed.pending, self.census_memo
            )
            return Observed(seen, lease_obj), listed
        jobs = await self._list_jobs(job.namespace, fence=fence)
        listed = await self._listed(job.namespace, jobs, now, record)
        seen = search_admission.survey(job, jobs, self.gate, now, listed.pending, self.census_memo)
        if search_admission.lease_needed(job, seen):
            return Observed(seen, await self._get_lease(job.namespace)), listed
        return Observed(seen), listed  # Gate A does not apply: the Lease is not read

    async def _listed(
        self,
        namespace: str,
        jobs: list[dict[str, Any]],
        now: datetime,
        record: AdmissionRecord | None,
    ) -> Listed:
        names = frozenset(str((j.get("metadata") or {}).get("name") or "") for j in jobs)
        ids = frozenset(
            str(((j.get("metadata") or {}).get("labels") or {}).get(JOB_ID_LABEL) or "")
            for j in jobs
        )
        unlisted = record.unlisted(names, now) if record is not None else ()
        finished = await finished_jobs(
            self.api, namespace, (e.name for e in unlisted), self.webhook.api_timeout_seconds
        )
        pending = tuple(e.ref(namespace) for e in unlisted if e.name not in finished)
        return Listed(jobs, names, ids, pending, finished)

    async def _list_jobs(self, namespace: str, *, fence: bool) -> list[dict[str, Any]]:
        """The census's Jobs: from the replica's watch at a fence when ``fence`` (a dry
        run writes nothing, not even the fence) and the watch can say; else the LIST."""
        if fence and self.census_watch is not None:
            fenced = await self._read(
                f"write the census fence {namespace}/{self.census_watch.fence_job}",
                "patch",
                "jobs",
                self.census_watch.jobs(namespace, self.webhook.api_timeout_seconds),
            )
            if fenced is not None:
                return fenced
        return await self._read(
            f"LIST search Jobs in namespace {namespace}",
            "list",
            "jobs",
            list_unfinished_search_jobs(
                self.api, namespace, deadline=self.webhook.api_timeout_seconds
            ),
        )

    async def _get_lease(self, namespace: str) -> dict[str, Any] | None:
        return await self._read(
            f"GET Lease {namespace}/{lease_name(namespace)}",
            "get",
            "leases",
            get_submit_lease(self.api, namespace, deadline=self.webhook.api_timeout_seconds),
        )

    async def _read(
        self, what: str, verb: str, resource: str, call: Coroutine[Any, Any, Any]
    ) -> Any:
        try:
            result = await call
        except ApiUnavailable as exc:
            self.on_api_unavailable(str(exc))
            self.metrics.record_api_error(verb, resource)
            raise ReadFailed(f"{what}: {exc}") from None
        except ApiError as exc:
            self.on_api_answer()
            self.metrics.record_api_error(verb, resource)
            why = f"API answered {exc.code} {exc.reason}: {exc.message}".rstrip(": ")
            raise ReadFailed(f"{what}: {why}") from None
        self.on_api_answer()
        return result

    # -- answering -----------------------------------------------------------

    async def _answer(
        self,
        webhook: str,
        request: AdmissionRequest,
        judge: Callable[[AdmissionRequest], Awaitable[Decision]],
        *,
        warn: bool,
    ) -> Answer:
        """Decide and turn the decision into a response (warn mode where it applies).
        The HTTP layer (:mod:`webhook.endpoint`) counts, times and logs the answer."""
        decision = await judge(request)
        if decision.allowed:
            outcome, response = "allowed", decision.response()
            for soft in decision.warned:  # a rule in warn mode would have refused
                self.metrics.record_would_deny(webhook, soft.reason)
        elif warn and self.webhook.enforcement == "warn":
            outcome, response = "warned", decision.warning_response(webhook)
            self.metrics.record_would_deny(webhook, decision.reason)
        else:
            outcome, response = "denied", decision.response()
        return Answer(response, outcome, decision)
