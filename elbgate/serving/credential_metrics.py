"""``elb_gate_credential_failures_total{component}``: attempts to obtain a fresh API token
that failed (an unreadable projected token file, an exec plugin that exits non-zero).

Each one is also a log line with its reason; the counter is what an alert watches: the
process keeps its last token while that is valid, so a rising count is the warning
before its API calls start failing for want of credentials (client-go counts its exec
plugin calls the same way, ``rest_client_exec_plugin_call_total``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

METRIC = "elb_gate_credential_failures"


class CountsFailures(Protocol):
    """What is read at each scrape (``elbgate.kube.config.TokenSource``)."""

    failures: int


class _Failures(Collector):
    def __init__(self, component: str, source: CountsFailures) -> None:
        self.component, self.source = component, source

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            METRIC,
            "Attempts to obtain a fresh Kubernetes API token that failed (see the log's reason).",
            labels=["component"],
        )
        family.add_metric([self.component], float(self.source.failures))
        yield family


def register_credential_failures(
    registry: CollectorRegistry, component: str, source: CountsFailures
) -> None:
    """Export ``source.failures`` as ``elb_gate_credential_failures_total{component}``."""
    registry.register(_Failures(component, source))
