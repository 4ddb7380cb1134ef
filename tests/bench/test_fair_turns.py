"""The fair-turns scenario (``make bench ARGS="--scenario fair-turns"``): what it counts,
and a tiny run of both modes on the session's control plane (what every part measured,
never how fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fair_turns import FairConfig, contended_shares, run, table
from testbed.controlplane import ControlPlane

pytestmark = [pytest.mark.kubectl, pytest.mark.timeout(600)]


def test_only_admissions_while_both_paths_wait_are_counted_as_contended() -> None:
    admitted = {"d1": 1.0, "o1": 2.0, "o2": 3.0, "d2": 4.0, "d3": 5.0}
    path_of = {"d1": "dashboard", "o1": "openapi", "o2": "openapi"}
    path_of |= {"d2": "dashboard", "d3": "dashboard"}
    shares = contended_shares(admitted, path_of)
    # After o2 the OpenAPI path has nothing left waiting: d2 and d3 were not contended.
    assert shares["admissions"] == {"dashboard": 1, "openapi": 2}
    assert shares["order"] == ["dashboard", "openapi", "openapi", "dashboard", "dashboard"]


def test_both_modes_run_every_search_of_both_paths(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    report = run(control_plane, tmp_path, FairConfig.quick(), lambda _m: None)
    assert set(report["modes"]) == {"off", "on"}
    for mode, result in report["modes"].items():
        assert result["admitted"] == 4 and not result["failed"], (mode, result)
        assert result["peak_active"] <= 3
        assert sorted(result["contended"]["order"]) == ["dashboard"] * 2 + ["openapi"] * 2
        assert set(result["longest_wait_s"]) == {"dashboard", "openapi"}
    assert report["modes"]["off"]["fair_turn_refusals"] == 0
    text = table(report)
    assert "| longest wait, dashboard |" in text and "| handoff p50 (idle slot) |" in text
