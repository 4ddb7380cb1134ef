"""The three admission handlers: read what a policy needs, decide, answer.

Each handler is ``AdmissionRequest -> Answer`` with no HTTP inside; the HTTP
layer (:mod:`webhook.endpoint`) counts, times and logs every answer the same way.
The reads are uncached, each under ``webhook.api_timeout_seconds``; a failed
or late read is a 503 denial naming what could not be verified (fail-closed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from elbgate.identities import SubmitterIdentities
from elbgate.kube.api import ApiError, ApiUnavailable, KubeApi
from elbgate.kube.reads import get_submit_lease, list_unfinished_search_jobs
from elbgate.names import lease_name
from elbgate.settings import GateSettings, RuleSettings, WebhookSettings
from webhook import lease_guard, lease_stamp, search_admission
from webhook.decision import Decision, unverified
from webhook.endpoint import Answer
from webhook.lease_request import LeaseRequest
from webhook.metrics import LEASE_GUARD, LEASE_STAMP, SEARCH_ADMISSION, WebhookMetrics
from webhook.node_rules import NodesSeen
from webhook.review import AdmissionRequest
from webhook.search_admission import NOT_READ, JobRequest, Observed, Reads, node_rules_on

_log = logging.getLogger("webhook.admission")


def utc_now() -> datetime:
    return datetime.now(UTC)


class ReadFailed(Exception):
    """An API read needed for a decision failed; the message names the read and why."""


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
    nodes: Callable[[], NodesSeen] | None = None
    """The Node watch cache's view (:meth:`webhook.cluster_view.ClusterView.seen`);
    read only while a node rule is on. No API call."""

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
        return lease_guard.decide(
            LeaseRequest.from_admission(request),
            self.gate,
            self.webhook,
            self.clock(),
            self.identities,
        )

    # -- search admission reads ----------------------------------------------

    async def _judge_job(self, request: AdmissionRequest) -> Decision:
        job = JobRequest.from_admission(request)
        now = self.clock()
        reads = search_admission.reads_needed(job)
        try:
            observed = await self._observe(job, reads, now)
        except ReadFailed as exc:
            return unverified(f"Gate A/B for {job.ref}", str(exc))
        if reads is not Reads.NONE and node_rules_on(self.rules):
            seen = self.nodes() if self.nodes else NodesSeen(None, "no Node watch is running")
            observed = replace(observed, nodes=seen)
        decision = search_admission.decide(
            job, observed, self.gate, self.rules, now, self.identities
        )
        if observed.census is not None:
            ceiling = decision.details.get("effective_ceiling", self.gate.max_run_concurrency)
            self.metrics.record_census(job.namespace, observed.census.count, int(ceiling))
        return decision

    async def _observe(self, job: JobRequest, reads: Reads, now: datetime) -> Observed:
        if reads is Reads.NONE:
            return Observed()
        if reads is Reads.LEASE:
            return Observed(None, await self._get_lease(job.namespace))
        if reads is Reads.JOBS_AND_LEASE:
            results = await asyncio.gather(
                self._list_jobs(job.namespace),
                self._get_lease(job.namespace),
                return_exceptions=True,
            )
            failures = [r for r in results if isinstance(r, BaseException)]
            for failure in failures:
                if not isinstance(failure, ReadFailed):
                    raise failure
            if failures:
                raise ReadFailed("; ".join(str(f) for f in failures))
            jobs, lease = results
            return Observed(search_admission.survey(job, jobs, self.gate, now), lease)
        seen = search_admission.survey(job, await self._list_jobs(job.namespace), self.gate, now)
        if search_admission.lease_needed(job, seen):
            return Observed(seen, await self._get_lease(job.namespace))
        return Observed(seen, NOT_READ)

    async def _list_jobs(self, namespace: str) -> list[dict[str, Any]]:
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
        return Answer(
            response, outcome, decision.reason, decision.code, decision.message, decision.details
        )
