"""``elb_gate_build_info``: which build each replica runs, as Prometheus exporters
conventionally say it (a gauge fixed at 1 whose labels are the facts).

Both servers register it, so a dashboard or an alert can tell a half-finished
rollout (two versions answering at once) from a finished one, and which Python
the image carries.
"""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Gauge

METRIC = "elb_gate_build_info"


def package_version() -> str:
    """The installed elb-gate version (``unknown`` when run from a bare checkout)."""
    try:
        return version("elb-gate")
    except PackageNotFoundError:
        return "unknown"


def register_build_info(registry: CollectorRegistry, component: str) -> Gauge:
    """Add ``elb_gate_build_info{version,component,python}`` = 1 to ``registry``."""
    gauge = Gauge(
        METRIC,
        "The elb-gate build this replica runs (always 1; the labels carry the facts).",
        ["version", "component", "python"],
        registry=registry,
    )
    gauge.labels(package_version(), component, platform.python_version()).set(1)
    return gauge
