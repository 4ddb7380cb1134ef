"""The liveness table of docs/liveness.md ("Every Job the submit paths create") against
the default liveness apps, the Job shapes of both submit paths, and the two readers.

The table is what a maintainer of either path reads; these tests hold it to the code:
every kind it marks as keeping the cluster in use is in ``DEFAULT_LIVENESS_APPS`` (and
nothing else is), every Job body the test bed builds from the two projects' builders has
its row with the same ``app``, TTL and pinning, and each row's two answer columns are
what elb-gate's reading (``is_terminal`` over the liveness apps, as the controller's
cache files a Job) and the dashboard probe's reading give for that Job running, finished
and failed.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from elbgate.job_status import is_terminal
from elbgate.settings import DEFAULT_LIVENESS_APPS, Settings
from testbed import dashboard_jobs, elastic_blast

DOC = Path(__file__).resolve().parents[2] / "docs" / "liveness.md"
HEADING = "## Every Job the submit paths create"
STATES = ("running", "finished", "failed")


def table() -> list[dict[str, str]]:
    """The rows of the table under :data:`HEADING`, keyed by column heading."""
    text = DOC.read_text()
    assert HEADING in text, f"{DOC.name} has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [
        dict(zip(header, (c.strip() for c in ln.strip("|").split("|")), strict=True))
        for ln in lines[2:]
    ]
    assert rows, "the table has no rows"
    return rows


ROWS = table()


def plain(cell: str) -> str:
    return cell.replace("`", "").strip()


def name_pattern(row: dict[str, str]) -> re.Pattern[str]:
    """``init-ssd-<id8>-<n>`` → a pattern a Job name of that kind matches."""
    name = plain(row["Job"]).split(" (")[0]
    parts = re.split(r"<[^>]+>", name)
    return re.compile("[a-z0-9-]+".join(re.escape(p) for p in parts) + "$")


def row_of(job: dict[str, Any]) -> dict[str, str]:
    name = job["metadata"]["name"]
    found = [r for r in ROWS if name_pattern(r).match(name)]
    assert len(found) == 1, f"{name}: {len(found)} rows of the table match it"
    return found[0]


def keeps_in_use(row: dict[str, str]) -> bool:
    value = plain(row["keeps the cluster in use"])
    assert value in ("yes", "no"), value
    return value == "yes"


def answers(row: dict[str, str], column: str) -> dict[str, bool | None]:
    """A row's ``true · false · false`` cell by state (``not read``: all ``None``)."""
    cell = plain(row[column])
    if cell == "not read":
        return dict.fromkeys(STATES)
    values = [v.strip() for v in cell.split("·")]
    assert len(values) == 3 and set(values) <= {"true", "false"}, cell
    return {s: v == "true" for s, v in zip(STATES, values, strict=True)}


def ttl_of(row: dict[str, str]) -> int | None:
    cell = plain(row["TTL after finished"])
    return None if cell == "none" else int(cell.split(" s")[0])


def bodies() -> list[dict[str, Any]]:
    """One body of every Job kind the test bed builds from the two projects."""
    job_id = elastic_blast.search_id(1)
    out = [job for flow in elastic_blast.FLOWS for job in elastic_blast.flow(flow, job_id)]
    out.append(elastic_blast.blast_batch(job_id, 0, "core_nt_shard_00", shard=0))
    out.append(elastic_blast.cloud_split())
    out += [
        dashboard_jobs.warmup("core_nt", 0, "aks-blastpool-0"),
        dashboard_jobs.prepare_db("core_nt", shards=3),
        dashboard_jobs.order_oracle("core_nt", 0, "aks-blastpool-0"),
    ]
    unique = {j["metadata"]["name"]: j for j in out}
    return list(unique.values())


BODIES = bodies()


def in_state(job: dict[str, Any], state: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``job`` with the status the Job controller writes in ``state``, and its pods."""
    body = copy.deepcopy(job)
    spec = body["spec"]
    pods = spec.get("completions") or 1
    labels = dict(spec["template"]["metadata"]["labels"])
    if state == "running":
        body["status"] = {"active": pods, "ready": pods, "startTime": elastic_blast.ts(60)}
        phase = "Running"
    elif state == "finished":
        body["status"] = {
            "succeeded": pods,
            "completionTime": elastic_blast.ts(1),
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"},
            ],
        }
        phase = "Succeeded"
    else:
        body["status"] = {
            "failed": (spec.get("backoffLimit") or 0) + 1,
            "conditions": [
                {"type": "FailureTarget", "status": "True"},
                {"type": "Failed", "status": "True"},
            ],
        }
        phase = "Failed"
    return body, [{"metadata": {"labels": labels}, "status": {"phase": phase}}] * pods


def elb_gate_in_use(job: dict[str, Any]) -> bool:
    """The controller's reading at the default settings: an unfinished Job of a liveness app."""
    apps = Settings.from_env({}).controller.liveness_apps
    return job["metadata"]["labels"].get("app") in apps and not is_terminal(job)


def test_the_default_liveness_apps_are_exactly_the_kinds_that_keep_the_cluster_in_use() -> None:
    keep = {plain(r["`app`"]) for r in ROWS if keeps_in_use(r)}
    not_kept = {plain(r["`app`"]) for r in ROWS if not keeps_in_use(r)}
    assert keep <= set(DEFAULT_LIVENESS_APPS), keep - set(DEFAULT_LIVENESS_APPS)
    assert set(DEFAULT_LIVENESS_APPS) <= keep, "a default app with no row in the table"
    assert not keep & not_kept
    assert Settings.from_env({}).controller.liveness_apps == DEFAULT_LIVENESS_APPS


def test_the_oracle_and_both_paths_db_jobs_are_in_the_defaults() -> None:
    for app in (
        dashboard_jobs.ORACLE_APP,
        dashboard_jobs.WARMUP_APP,
        dashboard_jobs.PREPARE_DB_APP,
    ):
        assert app in DEFAULT_LIVENESS_APPS
    # The legacy warm-up was a DaemonSet labelled db-warmup; no Job carries it.
    assert "db-warmup" not in DEFAULT_LIVENESS_APPS


def test_every_kind_that_keeps_the_cluster_in_use_has_a_job_shape_in_the_test_bed() -> None:
    shaped = {id(row_of(job)) for job in BODIES}
    missing = [plain(r["Job"]) for r in ROWS if keeps_in_use(r) and id(r) not in shaped]
    assert not missing, f"rows with no Job body of that kind: {missing}"


@pytest.mark.parametrize("job", BODIES, ids=lambda j: j["metadata"]["name"])
def test_each_job_shape_has_its_row_with_the_same_app_ttl_and_pinning(job: dict[str, Any]) -> None:
    row = row_of(job)
    assert plain(row["`app`"]) == job["metadata"]["labels"]["app"]
    assert ttl_of(row) == job["spec"].get("ttlSecondsAfterFinished")
    pod = job["spec"]["template"]["spec"]
    pinning = plain(row["pinned by"])
    assert ("nodeName" in pod) == pinning.startswith("nodeName")
    if "ordinal" in (pod.get("nodeSelector") or {}):
        assert "ordinal" in pinning


@pytest.mark.parametrize("job", BODIES, ids=lambda j: j["metadata"]["name"])
@pytest.mark.parametrize("state", STATES)
def test_each_row_answers_as_elb_gate_and_the_dashboard_probe_read_the_job(
    job: dict[str, Any], state: str
) -> None:
    row = row_of(job)
    body, pods = in_state(job, state)
    assert answers(row, "elb-gate `inUse`: running · finished · failed")[state] is elb_gate_in_use(
        body
    )
    probe = answers(row, "dashboard probe: running · finished · failed")[state]
    reads = body["metadata"]["labels"]["app"] in dashboard_jobs.PROBED_APPS
    assert (probe is not None) is reads, "'not read' is right exactly for the apps it skips"
    if probe is not None:
        assert probe is (dashboard_jobs.probe_counts([body], pods) > 0)


def test_a_half_done_prepare_db_is_in_use_for_both_readers() -> None:
    job = dashboard_jobs.prepare_db("core_nt", shards=3)
    job["status"] = {"succeeded": 1, "active": 2}
    labels = job["spec"]["template"]["metadata"]["labels"]
    pods = [
        {"metadata": {"labels": labels}, "status": {"phase": phase}}
        for phase in ("Succeeded", "Running", "Running")
    ]
    assert elb_gate_in_use(job)
    assert dashboard_jobs.probe_counts([job], pods) == 1  # by its Pods: its Job LIST skips it
    assert dashboard_jobs.probe_counts([job], pods[:1]) == 0
