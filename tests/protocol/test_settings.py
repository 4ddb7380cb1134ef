"""Settings: the keys and defaults the existing submit paths use; bad input refused by name."""

from __future__ import annotations

import pytest

from elbgate.settings import Settings, SettingsError, describe


def test_defaults_match_the_existing_submit_paths() -> None:
    s = Settings.from_env({})
    assert (
        s.max_run_concurrency,
        s.lease_ttl_seconds,
        s.clock_skew_seconds,
        s.finalizer_grace_seconds,
        s.capacity_wait_max_seconds,
        s.celery_soft_time_limit,
        s.celery_hard_time_limit,
    ) == (3, 900, 30, 300, 1800, 3300, 3600)
    assert s.enforcement == "deny"
    assert s.orphan_policy == "warn"  # never silently delete a finalizer (docs/runbook.md)
    assert s.effective_exec_timeout_seconds == 840


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
    assert s.max_run_concurrency == 5
    assert s.lease_ttl_seconds == 600
    assert s.effective_exec_timeout_seconds == 580
    assert s.submit_slot_wait_max_seconds == 90
    assert s.namespaces == ("blast-a", "blast-b")
    assert s.enforcement == "warn"
    assert s.resync_seconds == 2.5


def test_a_zero_clock_skew_still_derives_an_exec_timeout_below_the_ttl() -> None:
    s = Settings.from_env({"BLAST_LEASE_CLOCK_SKEW_SECONDS": "0"})
    assert s.effective_exec_timeout_seconds == 899


def test_an_empty_value_means_the_default() -> None:
    assert Settings.from_env({"BLAST_MAX_RUN_CONCURRENCY": "  "}).max_run_concurrency == 3


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
    assert Settings.from_env({}, max_run_concurrency=7).max_run_concurrency == 7
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
    assert (settings.db_staging, settings.capacity, settings.feasibility) == ("deny", "off", "off")
    assert Settings.from_env(
        {"ELB_GATE_CAPACITY_POOL_SELECTOR": "agentpool=blastpool"}
    ).capacity_pool_selector


def test_leader_timing_and_the_controllers_api_deadline_are_settings_like_the_rest() -> None:
    s = Settings.from_env({})
    assert (s.leader_lease_seconds, s.leader_renew_seconds) == (15.0, 5.0)  # client-go's
    assert (s.api_timeout_seconds, s.controller_api_timeout_seconds) == (1.5, 5.0)
    s = Settings.from_env(
        {
            "ELB_GATE_LEADER_LEASE_SECONDS": "30",
            "ELB_GATE_LEADER_RENEW_SECONDS": "10",
            "ELB_GATE_CONTROLLER_API_TIMEOUT_SECONDS": "2",
        }
    )
    assert (s.leader_lease_seconds, s.leader_renew_seconds) == (30.0, 10.0)
    assert s.controller_api_timeout_seconds == 2.0


def test_a_leader_renewal_no_shorter_than_its_lease_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(
            {"ELB_GATE_LEADER_LEASE_SECONDS": "5", "ELB_GATE_LEADER_RENEW_SECONDS": "5"}
        )
    assert any(
        "ELB_GATE_LEADER_RENEW_SECONDS (5) must be below ELB_GATE_LEADER_LEASE_SECONDS (5)" in p
        for p in caught.value.problems
    ), caught.value.problems
