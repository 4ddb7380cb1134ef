"""Settings: the keys and defaults the existing submit paths use; bad input refused by name."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from elbgate.settings import (
    SECTIONS,
    ClientSettings,
    ControllerSettings,
    GateSettings,
    RuleSettings,
    ServerSettings,
    Settings,
    SettingsError,
    WebhookSettings,
    describe,
)


def test_defaults_match_the_existing_submit_paths() -> None:
    s = Settings.from_env({})
    assert (
        s.gate.max_run_concurrency,
        s.gate.lease_ttl_seconds,
        s.gate.clock_skew_seconds,
        s.gate.finalizer_grace_seconds,
        s.client.capacity_wait_max_seconds,
        s.client.celery_soft_time_limit,
        s.client.celery_hard_time_limit,
    ) == (3, 900, 30, 300, 1800, 3300, 3600)
    assert s.webhook.enforcement == "deny"
    assert (
        s.controller.orphan_policy == "warn"
    )  # never silently delete a finalizer (docs/runbook.md)
    assert s.client.effective_exec_timeout_seconds(s.gate) == 840


def test_shared_keys_are_read_by_their_existing_names() -> None:
    s = Settings.from_env(
        {
            "BLAST_MAX_RUN_CONCURRENCY": "5",
            "BLAST_SUBMIT_LEASE_TTL_SECONDS": "600",
            "BLAST_LEASE_CLOCK_SKEW_SECONDS": "10",
            "BLAST_FINALIZER_GRACE_SECONDS": "60",
            "BLAST_CAPACITY_WAIT_MAX_SECONDS": "120",
            "BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS": "90",
            "ELB_GATE_NAMESPACES": " blast-a, blast-b ,",
            "ELB_GATE_ENFORCEMENT": "warn",
            "ELB_GATE_RESYNC_SECONDS": "2.5",
        }
    )
    assert s.gate.max_run_concurrency == 5
    assert s.gate.lease_ttl_seconds == 600
    assert s.client.effective_exec_timeout_seconds(s.gate) == 580
    assert s.client.submit_slot_wait_max_seconds == 90
    assert s.controller.namespaces == ("blast-a", "blast-b")
    assert s.webhook.enforcement == "warn"
    assert s.controller.resync_seconds == 2.5


def test_a_zero_clock_skew_still_derives_an_exec_timeout_below_the_ttl() -> None:
    s = Settings.from_env({"BLAST_LEASE_CLOCK_SKEW_SECONDS": "0"})
    assert s.client.effective_exec_timeout_seconds(s.gate) == 899


def test_an_empty_value_means_the_default() -> None:
    assert Settings.from_env({"BLAST_MAX_RUN_CONCURRENCY": "  "}).gate.max_run_concurrency == 3


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"BLAST_MAX_RUN_CONCURRENCY": "three"},
            "BLAST_MAX_RUN_CONCURRENCY='three': not a whole number",
        ),
        ({"BLAST_MAX_RUN_CONCURRENCY": "0"}, "BLAST_MAX_RUN_CONCURRENCY='0': must be >= 1"),
        (
            {"BLAST_MAX_RUN_CONCURRENCY": "2.5"},
            "BLAST_MAX_RUN_CONCURRENCY='2.5': not a whole number",
        ),
        (
            {"BLAST_LEASE_CLOCK_SKEW_SECONDS": "-1"},
            "BLAST_LEASE_CLOCK_SKEW_SECONDS='-1': must be >= 0",
        ),
        ({"BLAST_FINALIZER_GRACE_SECONDS": "5m"}, "BLAST_FINALIZER_GRACE_SECONDS='5m'"),
        (
            {"ELB_GATE_ENFORCEMENT": "audit"},
            "ELB_GATE_ENFORCEMENT='audit': must be one of deny, warn",
        ),
        ({"ELB_GATE_ORPHAN_POLICY": "keep"}, "ELB_GATE_ORPHAN_POLICY='keep'"),
        ({"ELB_GATE_RESYNC_SECONDS": "nan"}, "ELB_GATE_RESYNC_SECONDS='nan'"),
        ({"ELB_GATE_RESYNC_SECONDS": "inf"}, "ELB_GATE_RESYNC_SECONDS='inf'"),
        ({"ELB_GATE_NAMESPACES": ","}, "ELB_GATE_NAMESPACES=',': must name at least one value"),
        (
            {"ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS": "900"},
            "ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS (900) must be > 0 and < "
            "BLAST_SUBMIT_LEASE_TTL_SECONDS (900)",
        ),
        (
            {"BLAST_SUBMIT_LEASE_TTL_SECONDS": "60"},
            "ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS (0) must be > 0",
        ),
        (
            {"CELERY_TASK_SOFT_TIME_LIMIT": "3600", "CELERY_TASK_TIME_LIMIT": "3600"},
            "CELERY_TASK_SOFT_TIME_LIMIT (3600) < CELERY_TASK_TIME_LIMIT (3600)",
        ),
        (
            {"CELERY_TASK_SOFT_TIME_LIMIT": "600"},
            "need ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS (840) < CELERY_TASK_SOFT_TIME_LIMIT (600)",
        ),
        (
            {"BLAST_SUBMIT_LEASE_TTL_SECONDS": "7200"},
            "BLAST_SUBMIT_LEASE_TTL_SECONDS (7200) must lie within",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError) as err:
        Settings.from_env(env)
    assert any(named in p for p in err.value.problems), err.value.problems


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"BLAST_MAX_RUN_CONCURRENCY": "x", "ELB_GATE_ENFORCEMENT": "y"})
    assert len(err.value.problems) == 2
    assert str(err.value).startswith("invalid settings: BLAST_MAX_RUN_CONCURRENCY")


def test_overrides_win_over_the_environment_and_are_checked() -> None:
    assert Settings.from_env({}, max_run_concurrency=7).gate.max_run_concurrency == 7
    with pytest.raises(SettingsError):
        Settings.from_env({}, submit_exec_timeout_seconds=10_000)


def test_every_setting_is_documented_under_a_distinct_variable() -> None:
    rows = describe()
    names = [r[0] for r in rows]
    assert len(names) == len(set(names))
    assert all(doc for _, _, doc in rows)
    assert all(n.startswith(("BLAST_", "ELB_GATE_", "CELERY_")) for n in names)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"ELB_GATE_DB_STAGING": "maybe"},
            "ELB_GATE_DB_STAGING='maybe': must be one of deny, warn, off",
        ),
        (
            {"ELB_GATE_CAPACITY_POD_CPU": "lots"},
            "ELB_GATE_CAPACITY_POD_CPU='lots': not a Kubernetes quantity",
        ),
        ({"ELB_GATE_CAPACITY_POD_MEMORY": "0"}, "ELB_GATE_CAPACITY_POD_MEMORY='0': must be > 0"),
        ({"ELB_GATE_CAPACITY_POOL_SELECTOR": "a=(b"}, "ELB_GATE_CAPACITY_POOL_SELECTOR"),
    ],
)
def test_the_new_rule_settings_are_checked_naming_the_variable(
    env: dict[str, str], says: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    assert any(says in p for p in caught.value.problems), caught.value.problems


def test_db_staging_is_on_and_the_node_rules_off_by_default() -> None:
    settings = Settings.from_env({})
    assert (settings.rules.db_staging, settings.rules.capacity, settings.rules.feasibility) == (
        "deny",
        "off",
        "off",
    )
    assert Settings.from_env(
        {"ELB_GATE_CAPACITY_POOL_SELECTOR": "agentpool=blastpool"}
    ).rules.capacity_pool_selector


def test_leader_timing_and_the_controllers_api_deadline_are_settings_like_the_rest() -> None:
    s = Settings.from_env({})
    assert (s.controller.leader_lease_seconds, s.controller.leader_renew_seconds) == (
        15.0,
        5.0,
    )  # client-go's
    assert (s.webhook.api_timeout_seconds, s.controller.controller_api_timeout_seconds) == (
        1.5,
        5.0,
    )
    s = Settings.from_env(
        {
            "ELB_GATE_LEADER_LEASE_SECONDS": "30",
            "ELB_GATE_LEADER_RENEW_SECONDS": "10",
            "ELB_GATE_CONTROLLER_API_TIMEOUT_SECONDS": "2",
        }
    )
    assert (s.controller.leader_lease_seconds, s.controller.leader_renew_seconds) == (30.0, 10.0)
    assert s.controller.controller_api_timeout_seconds == 2.0


def test_a_leader_renewal_no_shorter_than_its_lease_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(
            {"ELB_GATE_LEADER_LEASE_SECONDS": "5", "ELB_GATE_LEADER_RENEW_SECONDS": "5"}
        )
    assert any(
        "ELB_GATE_LEADER_RENEW_SECONDS (5) must be below ELB_GATE_LEADER_LEASE_SECONDS (5)" in p
        for p in caught.value.problems
    ), caught.value.problems


def test_each_component_has_its_own_section_and_describe_lists_every_one() -> None:
    s = Settings.from_env({})
    assert [type(getattr(s, attr)) for attr, _cls in SECTIONS] == [
        GateSettings,
        ClientSettings,
        WebhookSettings,
        RuleSettings,
        ControllerSettings,
        ServerSettings,
    ]
    declared = [f.metadata["env"] for _attr, cls in SECTIONS for f in dataclasses.fields(cls)]
    assert [name for name, _default, _doc in describe()] == declared
    assert len(declared) == 66


def test_an_override_lands_in_the_section_that_declares_it() -> None:
    s = Settings.from_env(
        {"ELB_GATE_RESYNC_SECONDS": "7"}, leader_lease_seconds=30.0, db_staging="warn"
    )
    assert (s.controller.resync_seconds, s.controller.leader_lease_seconds) == (7.0, 30.0)
    assert s.rules.db_staging == "warn"
    assert s.gate == GateSettings() and s.webhook == WebhookSettings()
    assert Settings.of(max_run_concurrency=2).gate.max_run_concurrency == 2


def test_an_override_naming_no_setting_is_refused_not_ignored() -> None:
    with pytest.raises(TypeError, match="no setting named 'max_concurrency'"):
        Settings.from_env({}, max_concurrency=2)
    with pytest.raises(TypeError, match="no setting named 'gate'"):
        Settings.of(gate=GateSettings())


def test_the_leader_timing_rule_spans_the_controller_section_only() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({}, leader_renew_seconds=20.0)
    assert caught.value.problems == [
        "ELB_GATE_LEADER_RENEW_SECONDS (20) must be below ELB_GATE_LEADER_LEASE_SECONDS (15), "
        "or leadership lapses between renewals"
    ]


ROOT = Path(__file__).resolve().parents[2]
COMPOSITION_ROOTS = {
    "webhook/__main__.py",
    "webhook/server.py",
    "controller/__main__.py",
    "controller/server.py",
    "client/cli/connection.py",
}
"""Where the whole :class:`Settings` is built and split into sections; every other
module of the components takes the sections it uses."""


def _imports_the_composite(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "elbgate.settings":
            if any(alias.name in ("Settings", "*") for alias in node.names):
                return True
    return False


def test_only_the_composition_roots_import_the_whole_settings() -> None:
    modules = [
        p
        for pkg in ("elbgate", "webhook", "controller", "client")
        for p in (ROOT / pkg).rglob("*.py")
    ]
    importing = {str(p.relative_to(ROOT)) for p in modules if _imports_the_composite(p)}
    assert importing == COMPOSITION_ROOTS


def test_fair_turns_are_off_or_on_and_a_hold_must_be_below_the_forget_time() -> None:
    assert Settings.from_env({}).webhook.fair_turns == "off"
    assert Settings.from_env({"ELB_GATE_FAIR_TURNS": "on"}).webhook.fair_turns == "on"
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(
            {
                "ELB_GATE_FAIR_TURNS": "maybe",
                "ELB_GATE_FAIR_TURN_HOLD_SECONDS": "300",
                "ELB_GATE_FAIR_TURN_FORGET_SECONDS": "300",
            }
        )
    problems = " ".join(caught.value.problems)
    assert "ELB_GATE_FAIR_TURNS='maybe'" in problems
    assert "ELB_GATE_FAIR_TURN_HOLD_SECONDS (300) must be below" in problems
