"""elb_gate_lease_expiry_timestamp_seconds: one series per namespace while its
submit Lease is held, labelled with the holder, gone when it is free."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from controller.metrics import ControllerMetrics

METRIC = "elb_gate_lease_expiry_timestamp_seconds"


def _series(metrics: ControllerMetrics) -> dict[tuple[str, str], float]:
    return {
        (s.labels["namespace"], s.labels["holder"]): s.value
        for family in metrics.registry.collect()
        if family.name == METRIC
        for s in family.samples
    }


def test_a_held_lease_is_one_series_with_its_holder_and_expiry() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    metrics.set_lease_holder("blast", "dashboard-1", 1_800_000_000.0)
    metrics.set_lease_holder("default", "openapi-2", 1_800_000_100.0)
    assert _series(metrics) == {
        ("blast", "dashboard-1"): 1_800_000_000.0,
        ("default", "openapi-2"): 1_800_000_100.0,
    }


def test_a_renewal_moves_the_expiry_and_a_takeover_replaces_the_series() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    metrics.set_lease_holder("blast", "dashboard-1", 100.0)
    metrics.set_lease_holder("blast", "dashboard-1", 400.0)
    assert _series(metrics) == {("blast", "dashboard-1"): 400.0}
    metrics.set_lease_holder("blast", "openapi-9", 900.0)
    assert _series(metrics) == {("blast", "openapi-9"): 900.0}


def test_a_released_lease_leaves_no_series_and_a_second_release_is_harmless() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    metrics.set_lease_holder("blast", "dashboard-1", 100.0)
    metrics.set_lease_holder("blast", "", None)
    metrics.set_lease_holder("blast", "", None)
    assert _series(metrics) == {}


def test_every_replica_says_which_build_it_runs() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    (family,) = [f for f in metrics.registry.collect() if f.name == "elb_gate_build_info"]
    (sample,) = family.samples
    assert sample.value == 1
    assert sample.labels["component"] == "controller"
    assert sample.labels["version"] and sample.labels["python"].count(".") == 2


def test_a_reconciled_namespace_has_its_reclaim_counters_at_zero_so_the_first_reclaim_counts() -> (
    None
):
    metrics = ControllerMetrics(CollectorRegistry())
    metrics.set_namespace_state(
        "blast",
        active_searches=0,
        ceiling=3,
        orphans=0,
        lease_expired=False,
        in_use=False,
        idle_seconds=0.0,
        computed_at=0.0,
    )
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name
        in {"elb_gate_leases_reclaimed_total", "elb_gate_orphaned_finalizers_deleted_total"}
    }
    assert samples == {
        (
            "elb_gate_leases_reclaimed_total",
            (("namespace", "blast"), ("reason", "dead_holder")),
        ): 0.0,
        ("elb_gate_leases_reclaimed_total", (("namespace", "blast"), ("reason", "expired"))): 0.0,
        ("elb_gate_orphaned_finalizers_deleted_total", (("namespace", "blast"),)): 0.0,
    }
