"""Every Job the dashboard creates itself keeps its namespace in use while it runs, and
lets go of it once it has finished or failed (docs/liveness.md, "Every Job the submit
paths create").

A real controller at the default liveness settings (no ``ELB_GATE_LIVENESS_APPS``), the
real webhook, and the dashboard's Jobs as its builders make them (pinned by
``nodeName`` to a blast node, no requests, their TTLs), created as the dashboard creates
them: with administrator credentials, not through a gate. Each test also reads the
namespace as the dashboard's own auto-stop probe does (the same LISTs, the real field
selector), so the table's two columns are both checked on the real API.

The kubelet stand-in runs a pod until the test patches its annotations: then it exits
at once with the given code, so "running" and "finished" are states the test sets, not
moments it hopes to catch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testbed import dashboard_jobs
from testbed.controller_process import ControllerProcess
from testbed.controlplane import ControlPlane
from testbed.elastic_blast import for_api
from testbed.holders import free_leader_lease, settle
from testbed.kubelet_stand_in import EXIT_CODE, RUN_SECONDS
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.controller.observed import liveness

KINDS: dict[str, Callable[[], dict[str, Any]]] = {
    dashboard_jobs.ORACLE_APP: lambda: dashboard_jobs.order_oracle("core_nt", 3, "aks-blastpool-0"),
    dashboard_jobs.WARMUP_APP: lambda: dashboard_jobs.warmup("core_nt", 1, "aks-blastpool-1"),
    dashboard_jobs.PREPARE_DB_APP: lambda: dashboard_jobs.prepare_db("core_nt", shards=2),
}
OUTCOMES = ("finished", "failed")

Cluster = tuple[ControlPlane, dict[tuple[str, str], str], ControllerProcess]


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Cluster]:
    """The webhook and one controller (defaults) gating a namespace per kind and outcome."""
    cp = control_plane
    with WebhookProcess(cp) as hook:
        namespaces = {
            (app, outcome): hook.install.gate(cp.new_namespace("kinds"))
            for app in KINDS
            for outcome in OUTCOMES
        }
        free_leader_lease(cp)
        ctl = ControllerProcess.start(cp, name="ctl-kinds", namespaces=namespaces.values())
        try:
            ctl.wait_until(ctl.is_leader, 60, "the controller leads")
            yield cp, namespaces, ctl
        finally:
            ctl.stop()
            free_leader_lease(cp)


def dashboard_probe(cp: ControlPlane, ns: str) -> int:
    """The dashboard's auto-stop probe of ``ns``: its LISTs, then its count."""
    jobs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for app in dashboard_jobs.PROBED_APPS:
        jobs += cp.admin.list(
            "jobs", ns, label_selector=f"app={app}", field_selector="status.successful=0"
        )
        pods += cp.admin.list(
            "pods",
            ns,
            label_selector=f"app={app}",
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )
    return dashboard_jobs.probe_counts(jobs, pods)


def live_pods(cp: ControlPlane, ns: str, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in cp.admin.list("pods", ns, label_selector=f"job-name={job}")
        if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    ]


def exit_pods(cp: ControlPlane, ns: str, pods: list[dict[str, Any]], code: int) -> None:
    """Make each of ``pods``' containers exit now with ``code``."""
    for pod in pods:
        note = {RUN_SECONDS: "0", EXIT_CODE: str(code)}
        cp.admin.patch("pods", ns, pod["metadata"]["name"], {"metadata": {"annotations": note}})


def conditions(cp: ControlPlane, ns: str, job: str) -> set[str]:
    status = cp.admin.get("jobs", ns, job).get("status") or {}
    return {c["type"] for c in status.get("conditions") or () if c.get("status") == "True"}


def run_until(cp: ControlPlane, ns: str, job: str, condition: str, code: int) -> None:
    """Exit every pod of ``job`` with ``code`` (the retries too) until ``condition``."""

    def done() -> bool:
        if condition in conditions(cp, ns, job):
            return True
        exit_pods(cp, ns, live_pods(cp, ns, job), code)
        return False

    wait_until(done, 120, f"{job} {condition}", 0.2)


def start(cp: ControlPlane, ns: str, app: str) -> tuple[dict[str, Any], str]:
    body = KINDS[app]()
    created = cp.admin.create(for_api(body, ns))
    name = created["metadata"]["name"]
    expected = body["spec"].get("parallelism", 1)
    wait_until(lambda: len(live_pods(cp, ns, name)) == expected, 60, f"{name}'s pods run")
    return body, name


@pytest.mark.parametrize("app", KINDS)
def test_a_running_dashboard_job_keeps_the_namespace_in_use_until_it_finishes(
    cluster: Cluster, app: str
) -> None:
    cp, namespaces, ctl = cluster
    ns = namespaces[(app, "finished")]
    wait_until(lambda: liveness(cp, ns).get("inUse") == "false", 30, "idle at first")
    body, name = start(cp, ns, app)
    pod = body["spec"]["template"]["spec"]
    if "nodeName" in pod:  # pinned past the scheduler, as the dashboard pins it
        (running,) = live_pods(cp, ns, name)
        assert running["spec"]["nodeName"] == pod["nodeName"]
    wait_until(lambda: liveness(cp, ns).get("inUse") == "true", 30, "in use while it runs")
    served = ctl.get_json("/liveness")["namespaces"][ns]
    assert served["reasons"] == [f"unfinished Jobs: app={app}"]
    assert served["activeSearches"] == 0  # no search: only the Job holds the namespace
    probe_says = dashboard_probe(cp, ns) > 0
    assert probe_says is (app in dashboard_jobs.PROBED_APPS)

    if app == dashboard_jobs.PREPARE_DB_APP:
        # One index done, the other still copying: not finished, still in use.
        first, _second = sorted(live_pods(cp, ns, name), key=lambda p: p["metadata"]["name"])
        exit_pods(cp, ns, [first], 0)
        wait_until(
            lambda: cp.admin.get("jobs", ns, name).get("status", {}).get("succeeded") == 1,
            60,
            "one index succeeded",
        )
        settle(cp, ctl, ns)
        assert liveness(cp, ns)["inUse"] == "true"
        assert dashboard_probe(cp, ns) > 0  # by its Pod LIST: its Job LIST skips it now

    run_until(cp, ns, name, "Complete", 0)
    wait_until(lambda: liveness(cp, ns).get("inUse") == "false", 30, "idle once finished")
    assert dashboard_probe(cp, ns) == 0
    job = cp.admin.get("jobs", ns, name)  # finished, kept until its TTL (or for ever)
    assert job["spec"].get("ttlSecondsAfterFinished") == body["spec"].get("ttlSecondsAfterFinished")


@pytest.mark.parametrize("app", KINDS)
def test_a_failed_dashboard_job_no_longer_holds_the_namespace(cluster: Cluster, app: str) -> None:
    cp, namespaces, ctl = cluster
    ns = namespaces[(app, "failed")]
    wait_until(lambda: liveness(cp, ns).get("inUse") == "false", 30, "idle at first")
    _body, name = start(cp, ns, app)
    wait_until(lambda: liveness(cp, ns).get("inUse") == "true", 30, "in use while it runs")
    # A first failure is retried (backoffLimit 1, or 2 per index): still in use.
    exit_pods(cp, ns, live_pods(cp, ns, name), 1)
    wait_until(
        lambda: (cp.admin.get("jobs", ns, name).get("status") or {}).get("failed"),
        60,
        "a pod failed",
    )
    if "Failed" not in conditions(cp, ns, name):
        settle(cp, ctl, ns)
        assert liveness(cp, ns)["inUse"] == "true"
    run_until(cp, ns, name, "Failed", 1)
    wait_until(lambda: liveness(cp, ns).get("inUse") == "false", 30, "idle once failed")
    assert dashboard_probe(cp, ns) == 0
