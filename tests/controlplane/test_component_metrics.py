"""What the test bed reads off a component's ``/metrics``: one sample by its exact name,
and a histogram's samples by its family name."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from testbed.component import ComponentProcess


class Scraped(ComponentProcess):
    """A component whose ``/metrics`` answered ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def metrics(self) -> str:
        return self.text


def exposition() -> str:
    registry = CollectorRegistry()
    Counter("elb_gate_things", "Things.", registry=registry).inc(3)
    Histogram("elb_gate_wait_seconds", "Waits.", ["phase"], registry=registry).labels(
        phase="write"
    ).observe(0.2)
    return generate_latest(registry).decode()


def test_a_metric_is_read_by_its_sample_name_only() -> None:
    scraped = Scraped(exposition())
    assert scraped.metric("elb_gate_things_total") == 3.0
    # The counter's family name and the histogram's name are no sample's name.
    assert scraped.metric("elb_gate_things") is None
    assert scraped.metric("elb_gate_wait_seconds", {"phase": "write"}) is None
    assert scraped.metric("elb_gate_wait_seconds_count", {"phase": "write"}) == 1.0


def test_a_histograms_samples_are_read_by_its_family_name() -> None:
    names = {s.name for s in Scraped(exposition()).samples("elb_gate_wait_seconds")}
    assert {"elb_gate_wait_seconds_bucket", "elb_gate_wait_seconds_count"} <= names
    assert "elb_gate_wait_seconds_sum" in names
