"""The Grafana dashboard: its panels cover what operators need, every query
reads a metric the code exports, and — against a real Prometheus scraping the
real metric registries — every panel's own PromQL returns data and the PNG
renderer draws them all."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import matplotlib.image as plt_image
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from controller.metrics import ControllerMetrics
from manifests.render_dashboard import (
    DASHBOARD,
    GRID_COLUMNS,
    Prometheus,
    format_value,
    legend,
    render,
    with_gaps,
)
from testbed.prometheus import CONTROLLER_JOB, WEBHOOK_JOB, PrometheusServer, Target
from webhook.metrics import WebhookMetrics

FOREIGN = {"up"}
REQUIRED_PANELS = {
    "Admissions by decision",
    "Refusals by reason",
    "Admission latency p50 / p99",
    "Active searches vs ceiling",
    "Submit Lease holder and time to expiry",
    "Lease reclaims",
    "Orphaned finalizers",
    "Liveness: in use",
    "Liveness age",
    "Webhook replicas up",
    "Controller leader",
    "Version",
}


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _exported() -> set[str]:
    names = set()
    for metrics in (WebhookMetrics(CollectorRegistry()), ControllerMetrics(CollectorRegistry())):
        for family in metrics.registry.collect():
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
            names |= {family.name + s for s in suffixes.get(family.type, [""])}
    return names


# --- the dashboard file -----------------------------------------------------------------


def test_the_dashboard_has_the_panels_operators_need() -> None:
    assert REQUIRED_PANELS <= {p["title"] for p in _dashboard()["panels"]}


def test_every_metric_a_panel_reads_is_exported_by_the_code() -> None:
    exported = _exported()
    for panel in _dashboard()["panels"]:
        for target in panel["targets"]:
            used = set(re.findall(r"\b(elb_gate_[a-z_]+|up)\b", target["expr"]))
            assert used, panel["title"]
            assert used - FOREIGN <= exported, (panel["title"], (used - FOREIGN) - exported)


def test_panels_tile_the_grid_without_overlapping() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in _dashboard()["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_queries_use_the_datasource_and_namespace_variables_grafana_fills() -> None:
    dashboard = _dashboard()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "cluster", "namespace"}
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            if "namespace" in target["expr"] and "elb_gate_admission" not in target["expr"]:
                assert 'namespace=~"$namespace"' in target["expr"], panel["title"]


SERIES = re.compile(r"\b(elb_gate_[a-z_]+|up|kube_[a-z_]+)\b(\{[^}]*\})?")


def test_every_query_and_the_namespace_list_filter_by_the_cluster_variable() -> None:
    dashboard = _dashboard()
    (cluster,) = [v for v in dashboard["templating"]["list"] if v["name"] == "cluster"]
    assert cluster["allValue"] == ".*" and "cluster)" in cluster["definition"]
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    (namespaces,) = [v for v in dashboard["templating"]["list"] if v["name"] == "namespace"]
    queries.append(namespaces["definition"])
    selectors = [m for q in queries for m in SERIES.finditer(q)]
    assert len(selectors) >= len(queries)
    unfiltered = [m[0] for m in selectors if 'cluster=~"$cluster"' not in (m[2] or "")]
    assert unfiltered == []


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.0042, "s", "4.2 ms"),
        (1.5, "s", "1.50 s"),
        (3.0, "short", "3"),
        (2.5, "reqps", "2.50 req/s"),
        (90061, "dtdurations", "1d 1h"),
        (-125, "dtdurations", "-2m 5s"),
    ],
)
def test_values_are_written_in_the_panels_unit(value: float, unit: str, text: str) -> None:
    assert format_value(value, unit) == text


def test_legends_fill_grafanas_label_templates() -> None:
    assert (
        legend("{{namespace}} {{reason}}", {"namespace": "blast", "reason": "expired"})
        == "blast expired"
    )
    assert (
        legend("", {"__name__": "x", "holder": "dash-1", "namespace": "blast"})
        == "holder=dash-1, namespace=blast"
    )


def test_a_line_breaks_where_a_step_has_no_sample() -> None:
    points = [(0.0, 1.0), (2.0, 1.0), (10.0, 3.0), (12.0, 3.0)]
    drawn = with_gaps(points, 2.0)
    assert [t for t, _ in drawn] == [0.0, 2.0, 4.0, 10.0, 12.0]
    assert math.isnan(drawn[2][1]) and with_gaps(points[:2], 2.0) == points[:2]


# --- against a real Prometheus ------------------------------------------------------------


class _Exporter:
    """Serves one registry's /metrics on 127.0.0.1 (port 0), as a replica would."""

    def __init__(self, registry: CollectorRegistry) -> None:
        registry_ref = registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = generate_latest(registry_ref)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host!s}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _activity(
    webhook: WebhookMetrics, controller: ControllerMetrics, stop: threading.Event
) -> None:
    """What a busy namespace looks like to the metrics: admissions of every kind,
    searches against the ceiling, a Lease changing hands, reclaims, an orphan."""
    tick = 0
    controller.set_leader(True)
    webhook.record_certificate_expiry(time.time() + 200 * 86400)
    while not stop.is_set():
        tick += 1
        now = time.time()
        webhook.record_admission(
            "search-admission.elb-gate.io", "CREATE", "allowed", "ok", 0.004 + (tick % 5) / 1000
        )
        webhook.record_admission("lease-stamp.elb-gate.io", "UPDATE", "allowed", "ok", 0.001)
        if tick % 3 == 0:
            webhook.record_admission(
                "search-admission.elb-gate.io", "CREATE", "denied", "ceiling", 0.006
            )
        if tick % 7 == 0:
            webhook.record_admission(
                "lease-guard.elb-gate.io", "UPDATE", "denied", "takeover_live", 0.001
            )
        active = tick % 4
        controller.set_namespace_state(
            "blast",
            active_searches=active,
            ceiling=3,
            orphans=1 if tick % 10 < 5 else 0,
            lease_expired=False,
            in_use=active > 0,
            idle_seconds=0.0 if active else 30.0,
            computed_at=now,
        )
        controller.set_lease_holder("blast", f"dashboard-{tick // 20}", now + 900 - tick % 20)
        if tick % 10 == 0:
            controller.record_reclaim("blast", "dead_holder" if tick % 20 else "expired")
            controller.record_orphan_deleted("blast")
        stop.wait(0.25)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus (the Debian package's server) scraping both components'
    registries every second, with the labels a ServiceMonitor gives them."""
    webhook, controller = (
        WebhookMetrics(CollectorRegistry()),
        ControllerMetrics(CollectorRegistry()),
    )
    exporters = [_Exporter(webhook.registry), _Exporter(controller.registry)]
    stop = threading.Event()
    feeder = threading.Thread(target=_activity, args=(webhook, controller, stop), daemon=True)
    feeder.start()
    targets = [
        Target(WEBHOOK_JOB, exporters[0].address, "webhook-a"),
        Target(CONTROLLER_JOB, exporters[1].address, "controller-a"),
    ]
    server = PrometheusServer(targets, tmp_path_factory.mktemp("prometheus"), scrape_seconds=1)
    try:
        server.start()
        # Enough samples for rates and quantiles over a 10 s window on both jobs.
        server.wait_for_scrapes(8, timeout=90)
        yield server.client
    finally:
        stop.set()
        server.stop()
        for exporter in exporters:
            exporter.close()


def test_every_panel_returns_data_from_the_real_metrics_and_the_png_is_drawn(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    out = tmp_path / "dashboard.png"
    results = render(prometheus, out, minutes=0.5, step=1, rate_interval="10s")
    assert [r.errors for r in results if r.errors] == []
    empty = [r.title for r in results if not r.series]
    assert empty == [], f"panels whose queries returned nothing: {empty}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The lines and the stat values are drawn on top of the panels, not hidden.
    pixels = plt_image.imread(out)[..., :3]
    line = (abs(pixels - (0x1F / 255, 0x77 / 255, 0xB4 / 255)).max(axis=-1) < 0.05).sum()
    green = (abs(pixels - (0x73 / 255, 0xBF / 255, 0x69 / 255)).max(axis=-1) < 0.05).sum()
    assert line > 2_000 and green > 500, (line, green)


def test_the_lease_panel_names_the_holder_and_a_time_to_expiry_under_the_ttl(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    results = render(prometheus, tmp_path / "d.png", minutes=0.5, step=1, rate_interval="10s")
    (lease,) = [r for r in results if r.title == "Submit Lease holder and time to expiry"]
    (row,) = lease.series
    assert row.legend.startswith("holder=dashboard-") and row.legend.endswith("namespace=blast")
    assert 0 < row.points[-1][1] <= 900


def test_a_broken_query_is_shown_on_its_panel_not_hidden(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    broken = _dashboard()
    broken["panels"] = broken["panels"][:1]
    broken["panels"][0]["targets"] = [{"refId": "A", "expr": "sum(rate(", "legendFormat": ""}]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    (result,) = render(
        prometheus,
        tmp_path / "b.png",
        minutes=0.5,
        step=1,
        rate_interval="10s",
        dashboard_path=path,
    )
    (error,) = result.errors
    assert error.startswith("A: ") and "parse error" in error
