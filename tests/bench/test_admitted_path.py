"""Search admission's figures are an admission's only when every measured request was
allowed, and the measured webhooks' API deadline is the run's to set (``--api-timeout``).
No timed assertions."""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from pathlib import Path

import pytest

from bench.__main__ import config_from, outcome_lines, parse_args
from bench.figures import all_figures
from bench.load import Measured, outcome_of
from bench.scenarios import (
    DEFAULT_API_TIMEOUT_SECONDS,
    WEBHOOK_TIMEOUT_SECONDS,
    BenchConfig,
    Series,
    _admitted_only,
    _latency_into,
    run,
)
from elbgate.settings import WebhookSettings
from testbed.controlplane import ATTACH_ENV, ControlPlane

# -- the API deadline --------------------------------------------------------------------


def test_without_the_option_the_webhooks_keep_their_own_deadline() -> None:
    config = config_from(parse_args([]))
    assert config.api_timeout_seconds is None
    assert config.webhook_env() == {}
    assert config.api_timeout == DEFAULT_API_TIMEOUT_SECONDS == 1.5


def test_the_option_reaches_the_webhooks_environment_and_the_reads_floor() -> None:
    config = config_from(parse_args(["--api-timeout", "4"]))
    assert config.api_timeout_seconds == 4.0 == config.api_timeout
    env = config.webhook_env()
    assert env == {"ELB_GATE_API_TIMEOUT_SECONDS": "4"}
    # What the webhook parses from it.
    parsed = WebhookSettings(api_timeout_seconds=float(env["ELB_GATE_API_TIMEOUT_SECONDS"]))
    assert parsed.api_timeout_seconds == 4.0


@pytest.mark.parametrize("value", ["0", "-1", str(WEBHOOK_TIMEOUT_SECONDS), "6", "soon"])
def test_a_deadline_outside_the_webhooks_timeout_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--api-timeout", value])
    assert "--api-timeout" in capsys.readouterr().err


def test_the_large_latency_passes_can_be_given_more_time() -> None:
    config = config_from(parse_args(["--large-latency-seconds", "30"]))
    assert config.latency_large.max_seconds == 30.0
    assert config.latency_large.requests == BenchConfig().latency_large.requests
    assert config_from(parse_args([])).latency_large == BenchConfig().latency_large


# -- refusals are not admissions ---------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "outcome"),
    [
        (b'{"response": {"allowed": false, "status": {"code": 429}}}', "denied-429"),
        (b'{"response": {"allowed": false, "status": {"code": 503}}}', "denied-503"),
        (b'{"response": {"allowed": false, "status": {}}}', "denied"),
    ],
)
def test_a_refusal_keeps_its_code(raw: bytes, outcome: str) -> None:
    assert outcome_of(200, raw) == outcome


def test_a_pass_with_one_refusal_records_no_admitted_path_figure() -> None:
    s = Series()
    allowed = Measured([2_000_000, 4_000_000], 1.0, Counter({"allowed": 2}))
    refused = Measured([2_000_000, 1_500_000_000], 1.0, Counter({"allowed": 1, "denied-503": 1}))
    _admitted_only(s, "hook.n0", allowed, _latency_into)
    _admitted_only(s, "hook.n80", refused, _latency_into)
    assert s.get("hook.n0.p50_ms") == [3.0]
    assert [math.isnan(v) for v in s.get("hook.n80.p50_ms")] == [True]
    assert [math.isnan(v) for v in s.get("hook.n80.p99_ms")] == [True]
    assert s.get("hook.n80.refused.p99_ms")[0] > 1000  # kept, apart, for the profile
    assert "hook.n0.refused.p50_ms" not in s.values


def test_outcomes_are_listed_per_job_count() -> None:
    outcomes = {
        "hook.n0": Counter({"allowed": 60}),
        "hook.n80": Counter({"allowed": 58, "denied-503": 2}),
        "api.n80": Counter({"jobs=244,lease=yes": 60}),
    }
    assert outcome_lines(outcomes, (0, 80)) == [
        "outcomes hook.n0: allowed 60",
        "outcomes hook.n80: allowed 58, denied-503 2",
    ]


class _CeilingOfOne(BenchConfig):
    """The measured webhooks with a ceiling of 1: the mix's two running searches (from 30
    Jobs on) fill it, so every search admission there is refused by Gate B."""

    def webhook_env(self) -> dict[str, str]:
        return {**BenchConfig.webhook_env(self), "BLAST_MAX_RUN_CONCURRENCY": "1"}


@pytest.mark.timeout(900)
def test_refused_admissions_on_the_control_plane_are_counted_and_never_reported_as_admitted(
    control_plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real webhook, its ServiceAccount and the shipped RBAC at 30 Jobs: the census
    counts 2 active searches against a ceiling of 1, so the webhook refuses each
    admission (429) while the no-op making the same reads allows. The outcomes say so,
    and the table has no admitted-path latency or CPU at 30 Jobs, so no target is judged
    on it. (At 0 Jobs first, the first admission would open the measured search and the
    ones at 30 would join it, allowed.)"""
    monkeypatch.setenv(ATTACH_ENV, str(control_plane.state_dir))
    quick = BenchConfig.quick()
    config = _CeilingOfOne(
        **{f.name: getattr(quick, f.name) for f in dataclasses.fields(BenchConfig)}
    )
    config = dataclasses.replace(
        config,
        job_counts=(30,),
        fast_paths=False,
        capacity=False,
        load=None,
        reclaim_runs=0,
        order_requests=0,
        controller_scale=False,
        api_timeout_seconds=4.0,
    )
    assert isinstance(config, _CeilingOfOne)
    affinity = os.sched_getaffinity(0)  # the harness pins the load generator (this process)
    try:
        harness = run(config, tmp_path, lambda _m: None)
    finally:
        os.sched_setaffinity(0, affinity)
    s = harness.series

    assert set(s.outcomes["hook.n30"]) == {"denied-429"}
    assert set(s.outcomes["reads.n30"]) == {"allowed"}  # the reads floor is not refused
    assert s.get("reads.n30.p50_ms")[0] > 0 and s.get("reads.n30.cpu_us")[0] > 0
    for key in ("p50_ms", "p99_ms", "cpu_us", "apiserver_cpu_us", "handler_p50_ms"):
        assert all(math.isnan(v) for v in s.get(f"hook.n30.{key}")), key
        assert s.get(f"hook.n30.refused.{key}"), key
    assert s.get("hook.n30.refused.p50_ms")[0] > 0
    assert any("hook.n30: unexpected outcomes" in note for note in s.notes)

    figures = {f.key: f for f in all_figures(s, config.job_counts, [], None, None)}
    assert math.isnan(figures["search.n30.p99"].value.median)
    assert figures["search.n30.p50"].met is None  # not judged on refusals
    assert figures["search.n30.p50_vs_reads"].baseline is not None
