"""The dashboard's split fan-out through the real admission chain.

The dashboard's storage-query split (:func:`testbed.clients.split_fan_out`)
takes the submit Lease as ``dashboard-split-<uuid>`` for each shard, Gate A only,
runs one ``elastic-blast submit`` per shard and never retries a shard. The Jobs are
ElasticBLAST's own (:mod:`testbed.elastic_blast`), created with ``kubectl`` as the
dashboard's one credential (its admin kubeconfig takes the Lease and runs submit),
and every request goes through the API server to the webhook over TLS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from testbed import elastic_blast as elb
from testbed.api import JsonObj
from testbed.clients import DashboardLeaseClient, ShardOutcome, new_holder, split_fan_out
from testbed.component import host_env
from testbed.controlplane import ControlPlane
from testbed.webhook_process import WebhookProcess
from tests.webhook.conftest import API_TIMEOUT_SECONDS, decisions

pytestmark = pytest.mark.kubectl

DASHBOARD = "dashboard-lease"
"""The dashboard's Kubernetes user (token-file user of the control plane)."""

IDENTITIES = f"""\
splitHolders:
  - holderPrefix: dashboard-split-
    users: [{DASHBOARD}]
"""
"""Split shards for the dashboard's user; no submitter reserves ``dashboard-``, so
anyone may write a ``dashboard-split-`` holder and only the stamp tells them apart."""


@pytest.fixture(scope="module")
def split_hook(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    path = tmp_path_factory.mktemp("identities") / "submitters.yaml"
    path.write_text(IDENTITIES)
    env = {
        "ELB_GATE_API_TIMEOUT_SECONDS": str(API_TIMEOUT_SECONDS),
        "ELB_GATE_SUBMITTER_IDENTITIES_FILE": str(path),
    }
    with WebhookProcess(control_plane, env) as proc:
        yield proc


def busy_namespace(cp: ControlPlane, hook: WebhookProcess, active: int) -> str:
    """A gated namespace already running ``active`` searches (created before gating)."""
    namespace = cp.new_namespace("split")
    for _ in range(active):
        cp.admin.create(elb.ready(elb.blast_batch(elb.search_id(), 0), namespace))
    return hook.install.gate(namespace)


def elastic_blast_submit(
    cp: ControlPlane, user: str, namespace: str, flow: str, job_id: str
) -> str:
    """One ``elastic-blast submit``: its Jobs in order, stopping at the first refusal
    (``""`` when every Job was created, else what kubectl printed)."""
    for job in elb.flow(flow, job_id):
        body = elb.for_api(job, namespace)
        result = cp.kubectl(user, "-n", namespace, "create", "-f", "-", input=json.dumps(body))
        if result.returncode != 0:
            return result.stderr.strip()
    return ""


def fan_out(
    cp: ControlPlane, user: str, namespace: str, shards: int, flow: str = "cloud-job-submission"
) -> tuple[Sequence[ShardOutcome], list[str]]:
    ids = [elb.search_id() for _ in range(shards)]
    outcomes = split_fan_out(
        lambda holder: DashboardLeaseClient.on(cp, user, namespace, holder=holder),
        shards,
        lambda shard, _holder: elastic_blast_submit(cp, user, namespace, flow, ids[shard]),
    )
    return outcomes, ids


def census(cp: ControlPlane, namespace: str, tmp: Path, user: str = "operator") -> JsonObj:
    """``elb-gate census -o json`` as ``user``, in ``namespace``."""
    kubeconfig = tmp / f"{user}.kubeconfig"
    cp.write_kubeconfig(kubeconfig, user, cp.token(user), namespace)
    result = subprocess.run(
        [sys.executable, "-m", "client", "census", "-o", "json"],
        capture_output=True,
        text=True,
        env=host_env(str(kubeconfig)),
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_a_five_shard_split_at_two_active_searches_runs_every_shard(
    control_plane: ControlPlane, split_hook: WebhookProcess, tmp_path: Path
) -> None:
    cp = control_plane
    ns = busy_namespace(cp, split_hook, active=2)
    outcomes, ids = fan_out(cp, DASHBOARD, ns, shards=5)
    assert [(o.phase, o.error) for o in outcomes] == [("submitted", "")] * 5
    assert all(o.holder.startswith("dashboard-split-") for o in outcomes)
    # Each shard's first Job opened its search as a split shard, through the record.
    opened = [
        dict(r["details"])  # type: ignore[call-overload]
        for r in decisions(split_hook, ns)
        if r.get("reason") == "split_shard"
    ]
    assert sorted(str(d["job_id"]) for d in opened) == sorted(ids)
    assert {d["split"] for d in opened} == {"dashboard-split-"}
    record = cp.admin.get("configmaps", ns, "elb-gate-admissions")
    assert all(job_id in record["data"]["batch-work.json"] for job_id in ids)
    assert sorted(json.loads(record["data"]["split-searches.json"])) == sorted(ids)
    # Counted as active by everyone else: a regular submit of the same path is refused.
    regular = DashboardLeaseClient.on(cp, DASHBOARD, ns, holder=new_holder("dashboard"))
    assert regular.acquire() == "acquired"
    try:
        refused = elastic_blast_submit(cp, DASHBOARD, ns, "cloud-job-submission", elb.search_id())
    finally:
        regular.release()
    assert "Gate B: 7/3 searches already active" in refused
    assert all(job_id in refused for job_id in ids)
    # elb-gate census shows the shards as such, the two other searches as regular ones.
    report = census(cp, ns, tmp_path)
    split_of = {s["id"]: s["split"] for s in report["searches"]}
    assert {i: split_of[i] for i in ids} == dict.fromkeys(ids, "dashboard-split-")
    assert list(split_of.values()).count(None) == 2
    assert (report["active"], report["splitShards"]) == (7, 5)
    # The webhook's gauge, as seen at the last admission (before the refused search).
    assert f'elb_gate_active_split_searches{{namespace="{ns}"}} 5.0' in split_hook.metrics()


def test_another_identity_with_the_split_prefix_gets_no_exemption(
    control_plane: ControlPlane, split_hook: WebhookProcess
) -> None:
    cp = control_plane
    ns = busy_namespace(cp, split_hook, active=2)
    outcomes, _ids = fan_out(cp, "mallory", ns, shards=5)
    # Its holders carry the prefix, and the guard let it take them (no submitter
    # reserves it), but the stamp says mallory: a regular search each, so the first
    # takes the last slot and the rest meet Gate B.
    assert all(o.holder.startswith("dashboard-split-") for o in outcomes)
    assert [o.phase for o in outcomes] == ["submitted"] + ["submit_failed"] * 4
    for shard in outcomes[1:]:
        assert "Gate B: 3/3 searches already active" in shard.error
        assert "carries split prefix dashboard-split-, but its stamped user mallory" in (
            shard.error
        )
    assert not [r for r in decisions(split_hook, ns) if r.get("reason") == "split_shard"]
