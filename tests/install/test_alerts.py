"""The PrometheusRule: valid for promtool, every alert fires and resolves on
synthetic series (alerts_test.yaml), uses only metrics the code exports, and
points at a runbook section that exists."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from controller.metrics import ControllerMetrics
from elbgate.settings import Settings
from tests.install.rendering import REPO, Obj, by_name_prefix, one
from webhook.metrics import WebhookMetrics

RUNBOOK = REPO / "docs" / "runbook.md"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
FOREIGN_METRICS = {"up", "kube_deployment_status_replicas_available"}
"""Series from Prometheus itself and kube-state-metrics."""


@pytest.fixture(scope="module")
def rule(rendered: dict[str, list[Obj]]) -> Obj:
    return one(rendered["monitoring"], "PrometheusRule", "elb-gate")


@pytest.fixture(scope="module")
def rules_dir(rule: Obj, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain Prometheus rules file (the PrometheusRule's groups) next to the unit tests."""
    directory = tmp_path_factory.mktemp("promtool")
    (directory / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(UNIT_TESTS, directory / UNIT_TESTS.name)
    return directory


def _alerts(rule: Obj) -> list[Obj]:
    return [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, check=False)


def test_promtool_accepts_the_rules(rules_dir: Path) -> None:
    proc = _promtool("check", "rules", "rules.yaml", cwd=rules_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_fires_and_resolves_in_the_promtool_unit_tests(rules_dir: Path) -> None:
    proc = _promtool("test", "rules", UNIT_TESTS.name, cwd=rules_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_unit_tests_cover_every_alert_firing_and_quiet(rule: Obj) -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    checks = [c for t in tests for c in t["alert_rule_test"]]
    fired = {c["alertname"] for c in checks if c["exp_alerts"]}
    quiet = {c["alertname"] for c in checks if not c["exp_alerts"]}
    names = {a["alert"] for a in _alerts(rule)}
    assert fired == names and quiet == names


def test_every_alert_has_a_summary_a_description_and_a_runbook_section(rule: Obj) -> None:
    headings = re.findall(r"^#+ (.+)$", RUNBOOK.read_text(), flags=re.MULTILINE)
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    for alert in _alerts(rule):
        notes = alert["annotations"]
        assert notes["summary"] and notes["description"], alert["alert"]
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}
        # No runbookBaseUrl in the kustomize profile: the section of the shipped runbook.
        assert "runbook_url" not in notes
        assert notes["runbook"] == f"docs/runbook.md#{alert['alert'].lower()}"
        assert (REPO / notes["runbook"].split("#")[0]) == RUNBOOK
        assert alert["alert"].lower() in anchors, f"docs/runbook.md lacks ## {alert['alert']}"


def test_by_default_no_alert_links_an_address_that_may_not_resolve(rule: Obj) -> None:
    kustomize = yaml.safe_load((REPO / "manifests" / "kustomize-values.yaml").read_text())
    assert "runbookBaseUrl" not in kustomize["monitoring"]["prometheusRule"]  # the chart's default
    text = yaml.safe_dump(rule["spec"])
    assert "http://" not in text and "https://" not in text


def _exported() -> set[str]:
    names = set()
    for metrics in (WebhookMetrics(CollectorRegistry()), ControllerMetrics(CollectorRegistry())):
        for family in metrics.registry.collect():
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
            names |= {family.name + s for s in suffixes.get(family.type, [""])}
    return names


def test_every_elb_gate_metric_an_alert_uses_is_exported_by_the_code(rule: Obj) -> None:
    exported = _exported()
    used = set()
    for alert in _alerts(rule):
        used |= set(re.findall(r"\b(elb_gate_[a-z_]+|up|kube_[a-z_]+)\b", alert["expr"]))
    assert used - FOREIGN_METRICS <= exported, (used - FOREIGN_METRICS) - exported
    assert {m for m in used if m.startswith("elb_gate_")}


def test_liveness_goes_stale_after_three_resync_periods(
    rule: Obj, rendered: dict[str, list[Obj]]
) -> None:
    env = by_name_prefix(rendered["base"], "ConfigMap", "elb-gate-settings-")["data"]
    resync = Settings.from_env(env).controller.resync_seconds
    (stale,) = [a for a in _alerts(rule) if a["alert"] == "ElbGateLivenessStale"]
    threshold = float(re.search(r">\s*(\d+)\s*$", stale["expr"].strip()).group(1))  # type: ignore[union-attr]
    assert threshold == 3 * resync


def test_the_servicemonitor_scrapes_both_metrics_services_keeping_their_namespace_label(
    rendered: dict[str, list[Obj]],
) -> None:
    monitor = one(rendered["monitoring"], "ServiceMonitor", "elb-gate")
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [
        svc["metadata"]["name"]
        for svc in rendered["base"]
        if svc["kind"] == "Service"
        and selector.items() <= svc["metadata"].get("labels", {}).items()
    ]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert sorted(scraped) == ["elb-gate-controller-metrics", "elb-gate-webhook-metrics"]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
