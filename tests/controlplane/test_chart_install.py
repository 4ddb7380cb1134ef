"""The Helm chart on the real control plane: the API server accepts everything it
renders, and the gates work through the chart's own webhook configurations
(namespaces selected by name from one list, the off-switch label, never a
namespace outside the list).

The webhook runs as a host process (no container runtime), so the chart's
configurations are registered with the testbed's one transformation
(``clientConfig.service`` → the process's URL, ``caBundle`` filled in).

The fast tier is enough for these claims (acceptance by the API server, namespace
selection), both the API server's; the chart as installed, on real nodes through the
Service, is tests/system/test_install.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.install.chart import helm, render, template_argv

PROBE = "elb-gate-probe"
"""The namespace the testbed writes a probe Lease in to see a configuration take effect."""
HOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def finalizer_job(name: str) -> str:
    """The first Job a direct-mode search creates, as ElasticBLAST labels it."""
    return json.dumps(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": {"app": "finalizer", "elb-job-id": name}},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "finalizer", "image": "busybox", "command": ["true"]}
                        ],
                    }
                },
            },
        }
    )


class ChartInstall:
    """The chart's objects applied, its webhook configurations served by a real webhook."""

    def __init__(self, cp: ControlPlane, hook: WebhookProcess, gated: str, outside: str) -> None:
        self.cp, self.hook, self.gated, self.outside = cp, hook, gated, outside
        self.user = cp.plain_user()

    def submit(self, namespace: str, name: str) -> subprocess.CompletedProcess[str]:
        """``kubectl create`` of a search's finalizer Job, as a user without the Lease."""
        return self.cp.kubectl(
            self.user, "-n", namespace, "create", "-f", "-", input=finalizer_job(name)
        )


@pytest.fixture(scope="module")
def chart(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartInstall]:
    gated = control_plane.new_namespace("chart")
    outside = control_plane.new_namespace("chart-outside")
    objects = render({"gatedNamespaces": [gated, PROBE], "certificates.source": "provided"})
    configurations = [o for o in objects if o["kind"] in HOOK_KINDS]
    manifest = tmp_path_factory.mktemp("chart") / "admission-webhooks.yaml"
    manifest.write_text(yaml.safe_dump_all(configurations))
    # Registering waits until a probe Lease write reaches this process: the probe
    # namespace is in the chart's list, so the chart's selector lets it through.
    with WebhookProcess(control_plane, manifest=manifest) as hook:
        # The chart's RoleBindings in its listed namespace, and a submitter's rights
        # (what a cluster that lets users create Jobs has) there and outside the list.
        for obj in objects:
            if obj["kind"] == "RoleBinding" and obj["metadata"]["namespace"] == gated:
                control_plane.admin.apply(obj)
        hook.install.gate(gated, label=False)
        hook.install.gate(outside, label=True)  # labelled gated, but not in the chart's list
        yield ChartInstall(control_plane, hook, gated, outside)


def test_the_api_server_accepts_every_object_the_chart_renders(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # helm's own output, as `helm template | kubectl apply` would send it; a
    # server-side dry run runs validation and admission (Pod Security included)
    # without changing the cluster the other tests share.
    restricted = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    release = control_plane.new_namespace("chart-release", restricted)
    rendered = subprocess_output(template_argv({}, namespace=release))
    done = control_plane.kubectl("admin", "apply", "--dry-run=server", "-f", "-", input=rendered)
    assert done.returncode == 0, done.stderr
    # Cluster-scoped objects (the ClusterRoles) may already exist, created by
    # another test without `kubectl apply`; kubectl then warns that it patches
    # them without a last-applied annotation. Any other warning (Pod Security,
    # deprecated API) is a finding.
    warnings = [
        line
        for line in done.stderr.splitlines()
        if "Warning" in line and "kubectl.kubernetes.io/last-applied-configuration" not in line
    ]
    assert not warnings, done.stderr
    kinds = {line.split("/")[0] for line in done.stdout.splitlines()}
    # The default registration: the controller creates the webhook configurations
    # from the chart's ConfigMap once a webhook Pod serves (docs/design.md,
    # "Registration"). The chart has no hook Job: uninstall must not need the image. Its
    # only Jobs are the gated namespaces' census fences, which never run.
    assert {"deployment.apps", "configmap", "job.batch"} <= kinds
    jobs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Job"]
    assert jobs and all(
        j["metadata"]["name"].startswith("elb-gate-census-fence-")
        and j["spec"]["suspend"] is True
        and j["spec"]["parallelism"] == 0
        and not (j["metadata"].get("annotations") or {})
        for j in jobs
    ), jobs
    assert not {k for k in kinds if k.endswith("webhookconfiguration.admissionregistration.k8s.io")}
    # What the controller will create must be accepted by the API server as well.
    held = next(
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc
        and doc["kind"] == "ConfigMap"
        and doc["metadata"]["name"] == "elb-gate-webhook-configurations"
    )
    configurations = [json.loads(raw) for raw in held["data"].values()]
    assert sorted(c["kind"] for c in configurations) == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": configurations})
    done = control_plane.kubectl("admin", "apply", "--dry-run=server", "-f", "-", input=listed)
    assert done.returncode == 0, done.stderr
    assert "validatingwebhookconfiguration.admissionregistration.k8s.io/elb-gate" in done.stdout
    assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/elb-gate" in done.stdout


def test_a_search_without_the_lease_is_refused_in_a_listed_namespace(chart: ChartInstall) -> None:
    done = chart.submit(chart.gated, "no-lease")
    assert done.returncode == 1
    assert (
        'admission webhook "search-admission.elb-gate.io" denied the request: Gate A' in done.stderr
    )


def test_a_namespace_outside_the_list_is_never_judged_even_labelled_gated(
    chart: ChartInstall,
) -> None:
    done = chart.submit(chart.outside, "not-listed")
    assert done.returncode == 0, done.stderr
    assert chart.cp.admin.find("jobs", chart.outside, "not-listed") is not None


def test_the_off_switch_label_stops_judging_a_listed_namespace(chart: ChartInstall) -> None:
    chart.cp.admin.patch(
        "namespaces", None, chart.gated, {"metadata": {"labels": {"elb-gate.io/gated": "false"}}}
    )
    try:
        attempt = iter(range(1000))
        wait_until(
            lambda: chart.submit(chart.gated, f"switched-off-{next(attempt)}").returncode == 0,
            60,
            "a submit in the switched-off namespace to be admitted",
            interval=0.5,
        )
    finally:
        chart.cp.admin.patch(
            "namespaces", None, chart.gated, {"metadata": {"labels": {"elb-gate.io/gated": None}}}
        )


def subprocess_output(argv: list[str]) -> str:
    """Run ``argv`` (helm) and return its stdout; fail with its stderr."""
    assert helm().is_file()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_in_warn_mode_a_webhook_outage_blocks_no_search_but_still_guards_the_lease(
    chart: ChartInstall, tmp_path: Path
) -> None:
    objects = render(
        {
            "gatedNamespaces": [chart.gated, PROBE],
            "certificates.source": "provided",
            "enforcement": "warn",
        }
    )
    manifest = tmp_path / "admission-webhooks.yaml"
    manifest.write_text(yaml.safe_dump_all([o for o in objects if o["kind"] in HOOK_KINDS]))
    with WebhookProcess(chart.cp, {"ELB_GATE_ENFORCEMENT": "warn"}, manifest=manifest) as warn:
        warned = chart.submit(chart.gated, "warned")
        assert warned.returncode == 0, warned.stderr
        assert "Warning: search-admission.elb-gate.io would deny: Gate A" in warned.stderr
        warn.kill()  # both replicas gone: nothing answers the API server
        admitted = chart.submit(chart.gated, "webhook-down")
        assert admitted.returncode == 0, admitted.stderr
        lease = json.dumps(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": f"elb-blast-submit-{chart.gated}"},
                "spec": {"holderIdentity": "openapi-1", "leaseDurationSeconds": 900},
            }
        )
        refused = chart.cp.kubectl(chart.user, "-n", chart.gated, "create", "-f", "-", input=lease)
        assert refused.returncode == 1
        assert 'failed calling webhook "lease-stamp.elb-gate.io"' in refused.stderr
