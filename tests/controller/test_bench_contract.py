"""The benchmark module keeps its contract with the bench harness (numbers are not judged
here: timings on a shared machine are noise; only the write count is exact)."""

from __future__ import annotations

from bench import controller_bench


def test_the_benchmark_reports_every_number_and_no_steady_state_writes() -> None:
    result = controller_bench.run(events=1_000)
    for key in ("cache_mb_per_1000_jobs", "event_cpu_us", "resync_cpu_ms", "steady_state_writes"):
        assert isinstance(result[key], int | float) and result[key] >= 0
    assert result["jobs"] == 1000 and result["events_measured"] == 1000
    assert result["first_reconcile_writes"] == 1  # the ConfigMap is created once...
    assert result["steady_state_writes"] == 0  # ...and then left alone
