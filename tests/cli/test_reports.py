"""What `elb-gate census` and `elb-gate lease` say, from observed objects (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from client.cli.census import census_report, render_table, verdict
from client.cli.lease_report import describe_lease, force_release_verdict, lease_summary
from elbgate.capacity import NodeView
from elbgate.census import census
from elbgate.settings import Settings
from testbed import elastic_blast as elb
from tests.builders import NOW, job, lease

SETTINGS = Settings.from_env({"BLAST_LEASE_CLOCK_SKEW_SECONDS": "30"})


def report(jobs: list[dict[str, Any]], the_lease: dict[str, Any] | None) -> dict[str, Any]:
    seen = census(jobs, NOW, SETTINGS.gate.finalizer_grace_seconds)
    return census_report("default", seen, the_lease, SETTINGS.gate, SETTINGS.rules, NOW)


@dataclass(frozen=True)
class VerdictCase:
    name: str
    active: int
    state: str
    expected: str


VERDICTS = [
    VerdictCase("at the ceiling gate B denies", 3, "held", "denied by Gate B: 3/3"),
    VerdictCase("over the ceiling gate B denies", 4, "free", "denied by Gate B: 4/3"),
    VerdictCase("a free lease means gate A denies", 1, "free", "denied by Gate A"),
    VerdictCase("an expired lease means gate A denies", 1, "expired", "denied by Gate A"),
    VerdictCase("no lease means gate A denies", 0, "absent", "denied by Gate A"),
    VerdictCase("room and a holder admits the holder only", 2, "held", "only for the Lease holder"),
]


@pytest.mark.parametrize("case", VERDICTS, ids=[c.name for c in VERDICTS])
def test_verdict_says_which_gate_would_decide(case: VerdictCase) -> None:
    assert case.expected in verdict(case.active, 3, {"state": case.state, "holder": "cli-1"})


def test_census_report_lists_active_searches_with_age_and_companions() -> None:
    jobs = [
        job("submit", "s1").aged(600).build(),
        job("finalizer", "s1").aged(30).build(),
        job("blast", "s2", name="blast-s2-0").aged(90).build(),
        job("blast", "done").complete().build(),
    ]
    out = report(jobs, lease("cli-abc", renewed_ago=5))
    assert out["active"] == 2 and out["ceiling"] == 3
    by_id = {s["id"]: s for s in out["searches"]}
    assert set(by_id) == {"s1", "s2"}
    assert by_id["s1"]["ageSeconds"] == 600
    assert by_id["s1"]["jobs"] == ["submit/submit-s1", "finalizer/finalizer-s1"]
    assert out["lease"]["holder"] == "cli-abc" and out["lease"]["state"] == "held"
    assert "only for the Lease holder cli-abc (2/3 active)" in out["verdict"]


def test_census_report_lists_orphaned_finalizers_which_hold_no_slot() -> None:
    out = report([job("finalizer", "old").aged(3600).build()], None)
    assert out["active"] == 0
    assert out["orphans"] == [
        {"name": "finalizer-old", "id": "old", "ageSeconds": 3600, "orphanedSince": None}
    ]
    table = render_table(out)
    assert "ORPHANED FINALIZER" in table and "finalizer-old" in table
    assert "no active searches" in table
    assert "does not exist" in table


def test_the_table_shows_counts_lease_and_verdict_first() -> None:
    out = report([job("blast", "s1").build()], lease("dashboard-x", renewed_ago=5))
    first, second, third = render_table(out).splitlines()[:3]
    assert first == "namespace default: 1/3 active, 0 orphaned finalizer(s)"
    assert second.startswith("Lease elb-blast-submit-default: held by dashboard-x until ")
    assert third.startswith("verdict: a new search would be admitted only for")


def aks_nodes(count: int = 3) -> tuple[NodeView, ...]:
    return tuple(
        NodeView.from_dict(
            {
                "metadata": {"name": f"aks-blastpool-{i}", "labels": {"agentpool": "blastpool"}},
                "status": {
                    "allocatable": {"cpu": "15740m", "memory": "126544352Ki"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        for i in range(count)
    )


def test_census_report_shows_which_database_is_being_staged_and_by_whom() -> None:
    jobs = [elb.init_ssd("job-a", n, "core_nt") for n in range(2)] + [elb.import_queries()]
    out = report(jobs, None)
    assert out["staging"] == [
        {"db": "core_nt", "by": "job-a", "jobs": ["init-ssd-job-a-0", "init-ssd-job-a-1"]}
    ]
    table = render_table(out)
    assert "DB STAGING  BY     SETUP JOBS" in table
    assert "core_nt     job-a  init-ssd-job-a-0, init-ssd-job-a-1" in table
    assert "no database being staged" in render_table(report([], None))


def test_census_report_shows_what_the_pools_nodes_hold() -> None:
    settings = Settings.of(capacity="deny", capacity_pool_selector="agentpool=blastpool")
    seen = census([job("blast", f"s{i}").build() for i in range(2)], NOW, 300)
    out = census_report(
        "default",
        seen,
        lease("cli-1", renewed_ago=5),
        settings.gate,
        settings.rules,
        NOW,
        aks_nodes(),
    )
    assert out["capacity"] == {
        "rule": "deny",
        "pool": "agentpool=blastpool",
        "readyNodes": 3,
        "podShape": "6 CPU / 3.8Gi",
        "nodeDerived": 2,
        "effectiveCeiling": 2,
        "explanation": "at 6 CPU / 3.8Gi per batch pod (ELB_GATE_CAPACITY_POD_CPU/_MEMORY): one "
        "pod per node on 3 ready nodes; tightest node aks-blastpool-0: floor(15740m / 6 CPU) = 2, "
        "floor(120.6Gi / 3.8Gi memory) = 32; effective ceiling min(BLAST_MAX_RUN_CONCURRENCY 3, "
        "2) = 2",
    }
    assert (out["ceiling"], out["configuredCeiling"]) == (2, 3)
    assert out["verdict"] == (
        "a new search would be denied by the capacity rule: 2/2 active (what the pool's nodes hold)"
    )
    table = render_table(out)
    assert table.splitlines()[0] == "namespace default: 2/2 active, 0 orphaned finalizer(s)"
    assert "capacity (rule deny, pool agentpool=blastpool): at 6 CPU / 3.8Gi per batch pod" in table


def test_with_the_capacity_rule_off_the_numbers_are_shown_but_the_ceiling_stays() -> None:
    seen = census([job("blast", f"s{i}").build() for i in range(2)], NOW, 300)
    out = census_report("default", seen, None, SETTINGS.gate, SETTINGS.rules, NOW, aks_nodes())
    assert out["ceiling"] == 3 and out["capacity"]["nodeDerived"] == 2
    assert "capacity (rule off, every node): at 6 CPU" in render_table(out)


def test_nodes_that_cannot_be_read_leave_the_census_standing() -> None:
    seen = census([], NOW, 300)
    out = census_report(
        "default", seen, None, SETTINGS.gate, SETTINGS.rules, NOW, "list nodes: 403 Forbidden"
    )
    assert out["capacity"] == {"rule": "off", "pool": None, "error": "list nodes: 403 Forbidden"}
    assert "capacity (rule off, every node): unknown (list nodes: 403 Forbidden)" in render_table(
        out
    )


@pytest.mark.parametrize(
    ("the_lease", "state", "text"),
    [
        (None, "absent", "does not exist"),
        (lease(""), "free", "free"),
        (lease("cli-1", renewed_ago=10), "held", "held by cli-1 until 2026-11-29T12:15:20"),
        (lease("cli-1", renewed_ago=2000), "expired", "EXPIRED at 2026-11-29T11:42:10"),
        (
            lease("cli-1", annotations={"elb-gate.io/holder-user": "alice"}),
            "held",
            "held by cli-1 (user alice) until",
        ),
    ],
)
def test_lease_summary_states(the_lease: dict[str, Any] | None, state: str, text: str) -> None:
    summary = lease_summary(the_lease, "elb-blast-submit-default", SETTINGS.gate, NOW)
    assert summary["state"] == state
    assert text in describe_lease(summary)


@dataclass(frozen=True)
class ForceCase:
    name: str
    lease: dict[str, Any] | None
    allowed: bool
    live: bool
    text: str


FORCE = [
    ForceCase("no lease: nothing to do", None, False, False, "no submit Lease exists"),
    ForceCase("a free lease: nothing to do", lease(""), False, False, "already free"),
    ForceCase(
        "a live lease is refused naming holder and expiry",
        lease("dashboard-a", renewed_ago=10, annotations={"elb-gate.io/holder-user": "dash"}),
        False,
        True,
        "it is live, held by dashboard-a (user dash) until 2026-11-29T12:15:20",
    ),
    ForceCase(
        "a lease inside the skew margin is still live",
        lease("dashboard-a", renewed_ago=910),
        False,
        True,
        "refusing",
    ),
    ForceCase(
        "an expired lease may be reclaimed",
        lease("dashboard-a", renewed_ago=931),
        True,
        False,
        "has expired",
    ),
    ForceCase(
        "a lease with an unparseable renewTime is never stolen",
        lease("dashboard-a", renew_raw="yesterday"),
        False,
        True,
        "an unknown time",
    ),
]


@pytest.mark.parametrize("case", FORCE, ids=[c.name for c in FORCE])
def test_force_release_only_reclaims_an_expired_lease(case: ForceCase) -> None:
    got = force_release_verdict(case.lease, SETTINGS.gate, NOW)
    assert (got.allowed, got.live) == (case.allowed, case.live)
    assert case.text in got.message
