"""``-o table|json|yaml`` on the reporting commands: the same facts for a person
or a script, as ``kubectl -o`` offers them (the last one from a live namespace
on the real API server)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from client.cli import build_parser, exit_codes, main
from client.cli.census import census_report, render_table
from client.cli.connection import render
from elbgate.census import census
from elbgate.settings import Settings
from testbed.controlplane import ControlPlane
from tests.builders import NOW, job, lease
from tests.client.conftest import search_job

SETTINGS = Settings()


def _report() -> dict[str, Any]:
    jobs = [job("finalizer", "a1").build(), job("blast", "a1").build(), job("submit", "b2").build()]
    seen = census(jobs, NOW, SETTINGS.gate.finalizer_grace_seconds)
    return census_report("default", seen, lease("dashboard-1"), SETTINGS.gate, SETTINGS.rules, NOW)


@pytest.mark.parametrize(
    "argv",
    [["census", "-o", "yaml"], ["lease", "status", "-o", "yaml"], ["census", "--output=yaml"]],
)
def test_yaml_is_an_accepted_output(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).output == "yaml"


def test_an_unknown_output_is_a_usage_error_listing_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["census", "-o", "wide"])
    assert exit_.value.code == exit_codes.USAGE
    assert "(choose from 'table', 'json', 'yaml')" in capsys.readouterr().err


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_carry_exactly_the_report(output: str) -> None:
    report = _report()
    text = render(report, output, render_table)
    assert (json.loads(text) if output == "json" else yaml.safe_load(text)) == report


def test_yaml_keeps_the_reports_field_order_and_block_style() -> None:
    text = render(_report(), "yaml", render_table)
    keys = [line.split(":")[0] for line in text.splitlines() if line and not line[0].isspace()]
    assert keys[:5] == ["namespace", "observedAt", "ceiling", "active", "searches"]
    assert "{" not in text


def test_table_is_the_default_and_the_human_view() -> None:
    assert build_parser().parse_args(["census"]).output == "table"
    assert render(_report(), "table", render_table) == render_table(_report())


def test_census_as_yaml_from_a_live_namespace(
    control_plane: ControlPlane, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ns = control_plane.new_namespace("yaml")
    control_plane.admin.create(search_job(ns, "b2", app="submit"))
    code = main(
        ["--kubeconfig", control_plane.kubeconfig("admin"), "census", "-n", ns, "-o", "yaml"]
    )
    out = capsys.readouterr()
    assert code == exit_codes.OK, out.err
    doc = yaml.safe_load(out.out)
    assert (doc["namespace"], doc["active"], doc["ceiling"]) == (ns, 1, 3)
    assert [s["id"] for s in doc["searches"]] == ["b2"]
    assert doc["searches"][0]["jobs"] == ["submit/submit-jobs-b2"]
    assert doc["lease"]["state"] == "absent"
    assert doc["verdict"].startswith("a new search would be denied by Gate A")
