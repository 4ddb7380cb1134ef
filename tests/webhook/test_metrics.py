"""The metric verbs: repeated answers land on the same series, whichever order they come in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from webhook.metrics import (
    DENIAL_REASONS,
    LEASE_GUARD,
    LEASE_STAMP,
    OPERATIONS,
    SEARCH_ADMISSION,
    WebhookMetrics,
)

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


# -- series that exist before their first event --------------------------------------------

WEBHOOK_DIR = Path(__file__).resolve().parents[2] / "webhook"
POLICY_MODULES = {
    "search_admission.py": SEARCH_ADMISSION,
    "node_rules.py": SEARCH_ADMISSION,
    "lease_guard.py": LEASE_GUARD,
    "fair_turn.py": LEASE_GUARD,
    "lease_stamp.py": LEASE_STAMP,
}
"""Each policy module and the webhook whose refusals it words."""


def _refusal_reasons(module: str) -> set[str]:
    """The reason of every ``refuse(code, "<reason>", …)`` in ``module``, and
    ``unverified`` for each ``unverified(…)`` it calls."""
    reasons: set[str] = set()
    for node in ast.walk(ast.parse((WEBHOOK_DIR / module).read_text())):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        if node.func.id == "refuse":
            reason = node.args[1]
            assert isinstance(reason, ast.Constant), ast.unparse(node)
            reasons.add(str(reason.value))
        elif node.func.id == "unverified":
            reasons.add("unverified")
    return reasons


def test_the_reason_table_names_every_refusal_the_policies_make() -> None:
    found: dict[str, set[str]] = {webhook: set() for webhook in DENIAL_REASONS}
    for module, webhook in POLICY_MODULES.items():
        found[webhook] |= _refusal_reasons(module)
    # The handler refuses fail-closed when a read for search admission fails.
    found[SEARCH_ADMISSION] |= _refusal_reasons("admission.py")
    assert found == {webhook: set(reasons) for webhook, reasons in DENIAL_REASONS.items()}


def test_every_refusal_reason_has_its_section_in_the_denials_page() -> None:
    text = (WEBHOOK_DIR.parent / "docs" / "denials.md").read_text()
    sections = dict(re.findall(r"^## .*?\(`([a-z.-]+)`.*?\)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    for webhook, reasons in DENIAL_REASONS.items():
        headings = re.findall(r"^### (.*)$", sections.get(webhook, ""), re.M)
        documented = {r for h in headings for r in re.findall(r"`([a-z_]+)`", h)}
        assert set(reasons) <= documented, (webhook, set(reasons) - documented)


def test_the_operations_are_those_the_shipped_configurations_register() -> None:
    registered = {}
    for doc in yaml.safe_load_all(
        (WEBHOOK_DIR.parent / "manifests" / "base" / "admission-webhooks.yaml").read_text()
    ):
        for hook in (doc or {}).get("webhooks") or []:
            registered[hook["name"]] = tuple(
                op for rule in hook["rules"] for op in rule["operations"]
            )
    assert registered == OPERATIONS


def test_every_refusal_error_and_failure_series_is_exported_at_zero_before_the_first() -> None:
    registry = CollectorRegistry()
    WebhookMetrics(registry)
    text = generate_latest(registry).decode()
    total = "elb_gate_admission_requests_total"
    for webhook, reasons in DENIAL_REASONS.items():
        for operation in OPERATIONS[webhook]:
            labels = {"webhook": webhook, "operation": operation}
            for reason in reasons:
                assert (
                    registry.get_sample_value(
                        total, {**labels, "decision": "denied", "reason": reason}
                    )
                    == 0
                )
            warned = {**labels, "decision": "warned", "reason": "ceiling"}
            assert registry.get_sample_value(total, warned) == (
                0 if webhook == SEARCH_ADMISSION else None
            )
            assert (
                registry.get_sample_value(
                    total, {**labels, "decision": "errored", "reason": "internal"}
                )
                == 0
            )
    would = "elb_gate_would_deny_total"
    for reason in DENIAL_REASONS[SEARCH_ADMISSION]:
        assert (
            registry.get_sample_value(would, {"webhook": SEARCH_ADMISSION, "reason": reason}) == 0
        )
    assert (
        registry.get_sample_value(would, {"webhook": LEASE_GUARD, "reason": "takeover_live"})
        is None
    )
    for verb, resource in (("list", "jobs"), ("get", "leases"), ("watch", "nodes")):
        labels = {"component": "webhook", "verb": verb, "resource": resource}
        assert registry.get_sample_value("elb_gate_api_errors_total", labels) == 0
    assert registry.get_sample_value("elb_gate_watch_restarts_total", {"resource": "nodes"}) == 0
    callers = "elb_gate_admission_callers_total"
    assert registry.get_sample_value(callers, {"caller": "unverified", "outcome": "limited"}) == 0
    # As Prometheus scrapes it: the line is there, at 0.
    assert (
        'elb_gate_admission_requests_total{decision="denied",operation="CREATE",reason="db_staging",'
        'webhook="search-admission.elb-gate.io"} 0.0'
    ) in text
    # Nothing is pre-created for what is allowed: those series come with traffic.
    assert (
        registry.get_sample_value(
            total,
            {
                "webhook": SEARCH_ADMISSION,
                "operation": "CREATE",
                "decision": "allowed",
                "reason": "ok",
            },
        )
        is None
    )


def test_the_first_refusal_of_a_kind_moves_its_series_from_zero_to_one() -> None:
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    labels = {
        "webhook": SEARCH_ADMISSION,
        "operation": "CREATE",
        "decision": "denied",
        "reason": "capacity",
    }
    total = "elb_gate_admission_requests_total"
    assert registry.get_sample_value(total, labels) == 0
    metrics.record_admission(SEARCH_ADMISSION, "CREATE", "denied", "capacity", 0.003)
    assert registry.get_sample_value(total, labels) == 1
    other = {**labels, "reason": "ceiling"}
    assert registry.get_sample_value(total, other) == 0
