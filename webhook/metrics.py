"""The webhook's metrics (docs/interfaces.md), recorded through verbs.

Callers say what happened (``record_admission``, ``record_api_error`` …) and
never touch metric objects; the registry is passed in, never global, so tests
and a second app in one process never collide.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from elbgate.serving.build_info import register_build_info

COMPONENT = "webhook"
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

# The series below are exported at 0 from start: a counter series that first
# appears already at 1 is invisible to rate() and increase(), so without them an
# alert or a dashboard panel would miss each kind of refusal the first time it
# happens (tests/webhook/test_metrics.py checks the tables against the code).
SEARCH_ADMISSION = "search-admission.elb-gate.io"
LEASE_GUARD = "lease-guard.elb-gate.io"
LEASE_STAMP = "lease-stamp.elb-gate.io"
OPERATIONS: dict[str, tuple[str, ...]] = {
    SEARCH_ADMISSION: ("CREATE", "UPDATE"),
    LEASE_GUARD: ("CREATE", "UPDATE", "DELETE"),
    LEASE_STAMP: ("CREATE", "UPDATE"),
}
"""The operations each webhook is registered for (its configuration's ``rules``)."""
DENIAL_REASONS: dict[str, tuple[str, ...]] = {
    SEARCH_ADMISSION: (
        "no_lease",
        "not_holder",
        "lease_expired",
        "ceiling",
        "capacity",
        "db_staging",
        "db_memory_infeasible",
        "missing_job_id",
        "multi_pod_job",
        "near_miss_label",
        "unverified",
    ),
    LEASE_GUARD: (
        "not_holder",
        "takeover_live",
        "release_not_holder",
        "delete_live",
        "stamp_mismatch",
        "prefix_reserved",
        "duration_bounds",
        "malformed",
        "unverified",
        "fair_turn",
    ),
    LEASE_STAMP: (),
}
"""Every reason each webhook refuses with (docs/denials.md); the stamp never refuses."""
WARN_MODE_WEBHOOKS = (SEARCH_ADMISSION,)
"""Where ``ELB_GATE_ENFORCEMENT=warn`` turns a refusal into a warning (``warned``)."""
API_READS = (
    ("list", "jobs"),
    ("get", "leases"),
    ("watch", "nodes"),
    ("watch", "configmaps"),
    ("watch", "jobs"),
    ("patch", "jobs"),
)
"""The API calls the webhook makes: the census, the Lease, the node rules' watch caches,
the census watch and its fence (``ELB_GATE_CENSUS_READ=watch``)."""
CENSUS_READS = (
    ("watch", "fenced"),
    ("list", "not_synced"),
    ("list", "fence_refused"),
    ("list", "watch_behind"),
)
"""With ``ELB_GATE_CENSUS_READ=watch``: where each census was read, and why not from the
watch (docs/design.md, "The census read at a fence")."""
CENSUS_FENCE_PHASES = ("write", "wait")
"""A fenced census read's two halves: the fence Job's patch, then its event's arrival."""
REJECTIONS: tuple[tuple[int, str], ...] = (
    (415, "content_type"),
    (413, "too_large"),
    (400, "not_json"),
    (400, "not_admission_review"),
    (403, "caller_refused"),
    (429, "caller_limited"),
)
"""Every (code, reason) the HTTP layer answers with before or instead of a decision:
not JSON, not an AdmissionReview, too large, the wrong content type; and, with
``ELB_GATE_CLIENT_AUTH`` verify or require, a caller refused or over its limit."""
CALLER_KINDS = ("api-server", "unverified")
CALLER_OUTCOMES = ("answered", "refused", "limited", "too_large", "malformed")


class WebhookMetrics:
    """Every ``elb_gate_*`` series the webhook exports, in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        register_build_info(registry, COMPONENT)
        self._requests = Counter(
            "elb_gate_admission_requests_total",
            "Admission requests by webhook, operation, decision and reason.",
            ["webhook", "operation", "decision", "reason"],
            registry=registry,
        )
        self._duration = Histogram(
            "elb_gate_admission_duration_seconds",
            "Time to answer one admission request.",
            ["webhook"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self._in_flight = Gauge(
            "elb_gate_admission_in_flight",
            "Admission requests being answered.",
            ["webhook"],
            registry=registry,
        )
        self._api_errors = Counter(
            "elb_gate_api_errors_total",
            "Kubernetes API calls that failed or timed out.",
            ["component", "verb", "resource"],
            registry=registry,
        )
        self._watch_restarts = Counter(
            "elb_gate_watch_restarts_total",
            "Relists after a watch ended in error (410 Gone, disconnect, API error).",
            ["resource"],
            registry=registry,
        )
        self._rejected = Counter(
            "elb_gate_admission_rejected_total",
            "Admission HTTP requests answered with a 4xx before a decision, by webhook, "
            "code and reason (content_type, too_large, not_json, not_admission_review, "
            "caller_refused, caller_limited).",
            ["webhook", "code", "reason"],
            registry=registry,
        )
        self._would_deny = Counter(
            "elb_gate_would_deny_total",
            "Requests admitted in warn mode that deny mode would have refused.",
            ["webhook", "reason"],
            registry=registry,
        )
        self._active = Gauge(
            "elb_gate_active_searches",
            "Active searches as last seen at admission.",
            ["namespace"],
            registry=registry,
        )
        self._split = Gauge(
            "elb_gate_active_split_searches",
            "Active searches opened as split shards (of elb_gate_active_searches), as last "
            "seen at admission.",
            ["namespace"],
            registry=registry,
        )
        self._ceiling = Gauge(
            "elb_gate_search_ceiling",
            "Gate B ceiling (BLAST_MAX_RUN_CONCURRENCY).",
            ["namespace"],
            registry=registry,
        )
        self._callers = Counter(
            "elb_gate_admission_callers_total",
            "Admission HTTP requests by caller (api-server, unverified) and outcome "
            "(answered, refused, limited, too_large, malformed); ELB_GATE_CLIENT_AUTH "
            "verify or require only.",
            ["caller", "outcome"],
            registry=registry,
        )
        self._unverified_in_flight = Gauge(
            "elb_gate_unverified_in_flight",
            "Requests in flight from callers not verified as the API server.",
            registry=registry,
        )
        self._census_reads = Counter(
            "elb_gate_census_reads_total",
            "Gate B census reads with ELB_GATE_CENSUS_READ=watch, by source (watch, list) "
            "and reason (fenced; not_synced, fence_refused, watch_behind: LISTed instead).",
            ["source", "reason"],
            registry=registry,
        )
        self._census_fence = Histogram(
            "elb_gate_census_fence_seconds",
            "With ELB_GATE_CENSUS_READ=watch, the two halves of a fenced census read: the "
            "fence Job's patch (write) and its event reaching the watch after it (wait).",
            ["phase"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self._cert_expiry = Gauge(
            "elb_gate_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use (unix seconds).",
            registry=registry,
        )
        # Label children of the per-request series, looked up once per label set:
        # ``.labels()`` costs a few µs per call on the fast path (docs/benchmarks.md,
        # finding 4). The label values come from small fixed sets (three webhooks,
        # the API's operations, the policies' reason codes); prometheus keeps one
        # child per set anyway, so this holds nothing it does not.
        self._answered: dict[tuple[str, str, str, str], tuple[Counter, Histogram]] = {}
        self._in_flight_by_webhook: dict[str, Gauge] = {}
        self._start_at_zero()

    def _start_at_zero(self) -> None:
        """Create the labelled series of every refusal, error and failure the webhook
        can count, at 0, before the first one happens."""
        for webhook, operations in OPERATIONS.items():
            decisions = ("denied", "warned") if webhook in WARN_MODE_WEBHOOKS else ("denied",)
            for operation in operations:
                for reason in DENIAL_REASONS[webhook]:
                    for decision in decisions:
                        self._requests.labels(webhook, operation, decision, reason)
                self._requests.labels(webhook, operation, "errored", "internal")
            for reason in DENIAL_REASONS[webhook] if webhook in WARN_MODE_WEBHOOKS else ():
                self._would_deny.labels(webhook, reason)
            for code, reason in REJECTIONS:
                self._rejected.labels(webhook, str(code), reason)
        for verb, resource in API_READS:
            self._api_errors.labels(COMPONENT, verb, resource)
            if verb == "watch":
                self._watch_restarts.labels(resource)
        for caller in CALLER_KINDS:
            for outcome in CALLER_OUTCOMES:
                self._callers.labels(caller, outcome)
        for source, reason in CENSUS_READS:
            self._census_reads.labels(source, reason)
        for phase in CENSUS_FENCE_PHASES:
            self._census_fence.labels(phase)

    @contextlib.contextmanager
    def in_flight(self, webhook: str) -> Iterator[None]:
        """Count a request as in flight while the block runs."""
        gauge = self._in_flight_by_webhook.get(webhook)
        if gauge is None:
            gauge = self._in_flight_by_webhook[webhook] = self._in_flight.labels(webhook)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def record_admission(
        self, webhook: str, operation: str, decision: str, reason: str, seconds: float
    ) -> None:
        """One answered request: decision ∈ allowed|denied|warned|errored."""
        key = (webhook, operation or "-", decision, reason)
        children = self._answered.get(key)
        if children is None:
            children = (self._requests.labels(*key), self._duration.labels(webhook))
            self._answered[key] = children
        counter, histogram = children
        counter.inc()
        histogram.observe(seconds)

    def record_rejected(self, webhook: str, code: int, reason: str) -> None:
        """One request answered with a 4xx before a decision (:data:`REJECTIONS`)."""
        self._rejected.labels(webhook, str(code), reason).inc()

    def record_would_deny(self, webhook: str, reason: str) -> None:
        self._would_deny.labels(webhook, reason).inc()

    def record_api_error(self, verb: str, resource: str) -> None:
        self._api_errors.labels(COMPONENT, verb, resource).inc()

    def record_watch_restart(self, resource: str) -> None:
        self._watch_restarts.labels(resource).inc()

    def record_census(self, namespace: str, active: int, ceiling: int) -> None:
        self._active.labels(namespace).set(active)
        self._ceiling.labels(namespace).set(ceiling)

    def record_split_searches(self, namespace: str, active: int) -> None:
        self._split.labels(namespace).set(active)

    def record_census_read(self, source: str, reason: str) -> None:
        """One census read with ``ELB_GATE_CENSUS_READ=watch`` (:data:`CENSUS_READS`)."""
        self._census_reads.labels(source, reason).inc()

    def record_census_fence(self, phase: str, seconds: float) -> None:
        """One phase of a fenced census read (:data:`CENSUS_FENCE_PHASES`)."""
        self._census_fence.labels(phase).observe(seconds)

    def record_caller(self, caller: str, outcome: str) -> None:
        """One admission HTTP request told apart by its client certificate."""
        self._callers.labels(caller, outcome).inc()

    def record_unverified_in_flight(self, count: int) -> None:
        self._unverified_in_flight.set(count)

    def record_certificate_expiry(self, not_after_unix: float) -> None:
        self._cert_expiry.set(not_after_unix)
