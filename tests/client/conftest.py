"""The submit-path client against the real control plane, with elb-gate's webhook
registered: every Lease write is stamped and guarded, every search Job judged.

Each test has a gated namespace of its own. Searches that must already be
running when a test starts are created before the namespace is gated (as
they would have been before elb-gate was installed), and they really run: the
Job controller makes their Pods and the kubelet stand-in runs them until
:func:`complete` lets their container exit 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from client.sync_kube import SyncKube
from elbgate.kube.config import KubeConfig
from elbgate.lease import Expiry, LeaseView
from elbgate.names import lease_name
from elbgate.settings import Settings
from testbed import elastic_blast as elb
from testbed.api import JsonObj
from testbed.audit_log import requests_to
from testbed.controlplane import ControlPlane
from testbed.kubelet_stand_in import RUN_SECONDS
from testbed.waiting import wait_until
from testbed.webhook_process import SHORT_LEASES, WebhookProcess


def small_settings(**env: str) -> Settings:
    """The client's settings: TTL 15 s, 1 s skew, so expiry is reachable in a test."""
    base = {
        "BLAST_SUBMIT_LEASE_TTL_SECONDS": "15",
        "BLAST_LEASE_CLOCK_SKEW_SECONDS": "1",
        "ELB_GATE_LEASE_MIN_DURATION_SECONDS": "1",
    }
    return Settings.from_env({**base, **env})


def short_settings(**env: str) -> Settings:
    """A submitter whose Lease lasts 2 s: it expires while a test watches."""
    return small_settings(
        BLAST_SUBMIT_LEASE_TTL_SECONDS="2",
        BLAST_LEASE_CLOCK_SKEW_SECONDS="0",
        ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS="1",
        **env,
    )


def search_job(namespace: str, job_id: str, app: str = "blast") -> JsonObj:
    """One Job of search ``job_id`` as elastic-blast writes it (:mod:`testbed.elastic_blast`;
    a batch Job searches swissprot); its pods run until :func:`complete`."""
    body = {
        "blast": lambda: elb.blast_batch(job_id, 0, "swissprot"),
        "submit": lambda: elb.submit_jobs(job_id),
        "finalizer": lambda: elb.finalizer(job_id),
    }[app]()
    return elb.ready(body, namespace)


def job_name(job: JsonObj) -> str:
    return str(job["metadata"]["name"])


def complete(cp: ControlPlane, namespace: str, name: str) -> None:
    """Let the Job's container exit 0 now; return once the Job controller has
    counted the success (the census then sees the Job as finished)."""
    pods = wait_until(
        lambda: cp.admin.list("pods", namespace, label_selector=f"job-name={name}"),
        60,
        f"a Pod of Job {namespace}/{name}",
    )
    for pod in pods:
        cp.admin.patch(
            "pods",
            namespace,
            pod["metadata"]["name"],
            {"metadata": {"annotations": {RUN_SECONDS: "0"}}},
        )
    wait_until(
        lambda: (cp.admin.get("jobs", namespace, name).get("status") or {}).get("succeeded"),
        60,
        f"Job {namespace}/{name} to succeed",
    )


def lease_of(cp: ControlPlane, namespace: str) -> JsonObj | None:
    return cp.admin.find("leases", namespace, lease_name(namespace))


def holder_of(cp: ControlPlane, namespace: str) -> str:
    found = lease_of(cp, namespace)
    return "" if found is None else str(found["spec"].get("holderIdentity") or "")


def wait_until_expired(cp: ControlPlane, namespace: str, skew_seconds: float = 0) -> JsonObj:
    """Wait until the stored Lease is past renewTime + duration + ``skew_seconds``."""

    def expired() -> JsonObj | None:
        stored = lease_of(cp, namespace)
        assert stored is not None
        until = Expiry(skew_seconds, 900).at(LeaseView.from_dict(stored))
        assert isinstance(until, datetime)
        return stored if datetime.now(UTC) >= until else None

    return dict(wait_until(expired, 60, f"Lease in {namespace} to expire", interval=0.05))


def lease_writes(cp: ControlPlane, namespace: str, user: str) -> list[JsonObj]:
    """The Lease as the API server committed each successful update by ``user``
    (from the audit log, in order)."""
    updates = requests_to(
        cp.audit_events(), "leases", namespace, lease_name(namespace), user=user, verbs=("update",)
    )
    return [
        e["responseObject"] for e in updates if (e.get("responseStatus") or {}).get("code") == 200
    ]


@pytest.fixture(scope="package")
def hook(control_plane: ControlPlane) -> Iterator[WebhookProcess]:
    """elb-gate's webhook, registered with the shipped configurations."""
    with WebhookProcess(control_plane, SHORT_LEASES) as running:
        yield running


@pytest.fixture
def ns(fresh_ns: str, hook: WebhookProcess) -> str:
    """A gated namespace of this test's own."""
    return hook.install.gate(fresh_ns)


def sync_kube(kubeconfig: str, timeout: float = 10) -> SyncKube:
    return SyncKube(KubeConfig.from_kubeconfig(kubeconfig), timeout=timeout)


@pytest.fixture
def kube_of(control_plane: ControlPlane) -> Iterator[Callable[[str], SyncKube]]:
    """API transports for token-file users (``kube_of("bob")``), closed after the test."""
    made: list[SyncKube] = []

    def make(user: str) -> SyncKube:
        made.append(sync_kube(control_plane.kubeconfig(user)))
        return made[-1]

    yield make
    for transport in made:
        transport.close()


@pytest.fixture
def kube(kube_of: Callable[[str], SyncKube]) -> SyncKube:
    """alice's transport (a plain user from the token file)."""
    return kube_of("alice")
