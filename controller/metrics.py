"""The controller's Prometheus metrics (names fixed in docs/interfaces.md).

One explicit registry per controller (no global state, so tests can build many), and verb
functions for callers: ``metrics.record_reclaim(namespace, "expired")``, never
``metric.labels(...).inc()`` scattered through the code.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from elbgate.serving.build_info import register_build_info

COMPONENT = "controller"


class ControllerMetrics:
    """Every metric the controller exports, behind verb functions."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        register_build_info(r, COMPONENT)
        self._reclaimed = Counter(
            "elb_gate_leases_reclaimed_total",
            "Submit Leases whose holder the controller cleared, by reason.",
            ["namespace", "reason"],
            registry=r,
        )
        self._reclaim_latency = Histogram(
            "elb_gate_reclaim_after_evidence_seconds",
            "Seconds from the evidence (holder gone, or Lease expired) to the reclaim, by case.",
            ["evidence"],
            buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300),
            registry=r,
        )
        self._lease_expired = Gauge(
            "elb_gate_lease_expired",
            "1 while the namespace's submit Lease is held but past its expiry.",
            ["namespace"],
            registry=r,
        )
        self._orphans = Gauge(
            "elb_gate_orphaned_finalizers",
            "Non-terminal finalizer Jobs with no live companion (census orphans).",
            ["namespace"],
            registry=r,
        )
        self._orphans_deleted = Counter(
            "elb_gate_orphaned_finalizers_deleted_total",
            "Orphaned finalizer Jobs the controller deleted (policy delete).",
            ["namespace"],
            registry=r,
        )
        self._in_use = Gauge(
            "elb_gate_in_use",
            "1 while the namespace is in use (auto-stop must not scale down).",
            ["namespace"],
            registry=r,
        )
        self._idle = Gauge(
            "elb_gate_idle_seconds",
            "Seconds the namespace has been idle (0 while in use).",
            ["namespace"],
            registry=r,
        )
        self._liveness_updated = Gauge(
            "elb_gate_liveness_updated_timestamp_seconds",
            "Unix time the namespace's liveness was last computed.",
            ["namespace"],
            registry=r,
        )
        self._active = Gauge(
            "elb_gate_active_searches",
            "Active searches (census), every reconcile.",
            ["namespace"],
            registry=r,
        )
        self._split = Gauge(
            "elb_gate_active_split_searches",
            "Active searches opened as split shards (of elb_gate_active_searches), every "
            "reconcile.",
            ["namespace"],
            registry=r,
        )
        self._ceiling = Gauge(
            "elb_gate_search_ceiling",
            "Gate B ceiling (BLAST_MAX_RUN_CONCURRENCY).",
            ["namespace"],
            registry=r,
        )
        self._reconcile = Histogram(
            "elb_gate_reconcile_duration_seconds",
            "Wall time of one namespace reconcile (observe, plan, apply).",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self._reconcile_errors = Counter(
            "elb_gate_reconcile_errors_total",
            "Reconciles that ended in an error (the next event or resync retries).",
            registry=r,
        )
        self._watch_restarts = Counter(
            "elb_gate_watch_restarts_total",
            "Relists after a watch ended in error (410 Gone, disconnect, API error).",
            ["resource"],
            registry=r,
        )
        self._lease_expiry = Gauge(
            "elb_gate_lease_expiry_timestamp_seconds",
            "Unix time the held submit Lease may be taken over (renewTime + duration + skew); "
            "present only while it is held, labelled with its holder.",
            ["namespace", "holder"],
            registry=r,
        )
        self._lease_holders: dict[str, str] = {}
        self._leader = Gauge(
            "elb_gate_leader", "1 while this replica holds the leader Lease.", registry=r
        )
        self._api_errors = Counter(
            "elb_gate_api_errors_total",
            "Kubernetes API calls that failed (error Status or no answer).",
            ["component", "verb", "resource"],
            registry=r,
        )

    # -- verbs ---------------------------------------------------------------

    def record_reclaim(
        self, namespace: str, reason: str, evidence: str = "", seconds: float | None = None
    ) -> None:
        """A submit Lease's holder was cleared; ``reason`` is ``expired`` or ``dead_holder``,
        ``evidence`` the holder-gone case, ``seconds`` the time since the evidence."""
        self._reclaimed.labels(namespace, reason).inc()
        if seconds is not None:
            self._reclaim_latency.labels(evidence or reason).observe(seconds)

    def record_orphan_deleted(self, namespace: str) -> None:
        self._orphans_deleted.labels(namespace).inc()

    def record_reconcile(self, seconds: float, ok: bool) -> None:
        self._reconcile.observe(seconds)
        if not ok:
            self._reconcile_errors.inc()

    def record_watch_restart(self, resource: str) -> None:
        self._watch_restarts.labels(resource).inc()

    def record_api_error(self, verb: str, resource: str) -> None:
        self._api_errors.labels(COMPONENT, verb, resource).inc()

    def set_leader(self, leading: bool) -> None:
        self._leader.set(1 if leading else 0)

    def set_namespace_state(
        self,
        namespace: str,
        *,
        active_searches: int,
        ceiling: int,
        split_searches: int = 0,
        orphans: int,
        lease_expired: bool,
        in_use: bool,
        idle_seconds: float,
        computed_at: float,
    ) -> None:
        """The per-namespace gauges, set together after every reconcile's plan."""
        # Counters of this namespace exist from its first reconcile, at 0: a series
        # that first appears at 1 is invisible to rate()/increase(), so the first
        # reclaim after a restart would never reach the dashboard or the alert.
        for reason in ("expired", "dead_holder"):
            self._reclaimed.labels(namespace, reason)
        self._orphans_deleted.labels(namespace)
        self._active.labels(namespace).set(active_searches)
        self._split.labels(namespace).set(split_searches)
        self._ceiling.labels(namespace).set(ceiling)
        self._orphans.labels(namespace).set(orphans)
        self._lease_expired.labels(namespace).set(1 if lease_expired else 0)
        self._in_use.labels(namespace).set(1 if in_use else 0)
        self._idle.labels(namespace).set(idle_seconds)
        self._liveness_updated.labels(namespace).set(computed_at)

    def set_lease_holder(self, namespace: str, holder: str, expires_at: float | None) -> None:
        """The namespace's Lease holder and when it expires; ``holder`` empty when free.
        One series per namespace at a time: the previous holder's is removed."""
        previous = self._lease_holders.pop(namespace, None)
        if previous is not None and previous != holder:
            self._lease_expiry.remove(namespace, previous)
        if holder and expires_at is not None:
            self._lease_expiry.labels(namespace, holder).set(expires_at)
            self._lease_holders[namespace] = holder
        elif previous is not None and previous == holder:
            self._lease_expiry.remove(namespace, previous)

    def render(self) -> bytes:
        """The text exposition format for ``GET /metrics``."""
        return generate_latest(self.registry)
