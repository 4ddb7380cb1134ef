"""The metric verbs: repeated answers land on the same series, whichever order they come in."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from webhook.metrics import WebhookMetrics

STAMP = "lease-stamp.elb-gate.io"
GUARD = "lease-guard.elb-gate.io"


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_each_answer_is_counted_once_on_its_own_label_set() -> None:
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    answers = [
        (STAMP, "UPDATE", "allowed", "renewed"),
        (STAMP, "UPDATE", "allowed", "renewed"),
        (GUARD, "UPDATE", "allowed", "renewed"),
        (STAMP, "", "errored", "internal"),
        (STAMP, "UPDATE", "allowed", "renewed"),
    ]
    for webhook, operation, decision, reason in answers:
        metrics.record_admission(webhook, operation, decision, reason, 0.002)
    total = "elb_gate_admission_requests_total"
    renewed = {"operation": "UPDATE", "decision": "allowed", "reason": "renewed"}
    assert value(registry, total, webhook=STAMP, **renewed) == 3
    assert value(registry, total, webhook=GUARD, **renewed) == 1
    assert (
        value(registry, total, webhook=STAMP, operation="-", decision="errored", reason="internal")
        == 1
    )
    count = "elb_gate_admission_duration_seconds_count"
    assert value(registry, count, webhook=STAMP) == 4
    assert value(registry, count, webhook=GUARD) == 1


def test_in_flight_returns_to_zero_after_nested_and_repeated_use() -> None:
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    gauge = "elb_gate_admission_in_flight"
    with metrics.in_flight(STAMP):
        with metrics.in_flight(STAMP):
            assert value(registry, gauge, webhook=STAMP) == 2
        assert value(registry, gauge, webhook=STAMP) == 1
    with metrics.in_flight(STAMP):
        assert value(registry, gauge, webhook=STAMP) == 1
    assert value(registry, gauge, webhook=STAMP) == 0
