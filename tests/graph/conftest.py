"""The real ElasticBLAST job graph on the real control plane: fixtures.

Each module runs its own webhook (the shipped configurations point at one process
at a time), with the settings its rules need; each test gets a fresh gated
namespace, a submitter that holds the submit Lease, and a clean-up that releases
every Lease and deletes the namespace (its Pods with it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from testbed import elastic_blast as elb
from testbed.controlplane import BLAST_POOL, ControlPlane
from testbed.install import SYSTEM_NAMESPACE
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.graph.submitter import Submitter

POOL_SELECTOR = "agentpool=blastpool"


@pytest.fixture(scope="session")
def ordinal_nodes(control_plane: ControlPlane) -> list[str]:
    """The blast-pool nodes labelled ``ordinal=0..2``, as ``elastic-blast`` labels them
    when it initialises a cluster: the local-SSD and sharded Jobs select them by it."""
    pool = ",".join(f"{k}={v}" for k, v in BLAST_POOL.items())
    nodes = sorted(
        n["metadata"]["name"] for n in control_plane.admin.list("nodes", label_selector=pool)
    )
    for ordinal, node in enumerate(nodes):
        control_plane.admin.patch(
            "nodes", None, node, {"metadata": {"labels": {"ordinal": str(ordinal)}}}
        )
    return nodes


@contextmanager
def webhook(cp: ControlPlane, env: Mapping[str, str] | None = None) -> Iterator[WebhookProcess]:
    """The webhook with ``env`` on top of the defaults, registered for the duration. Its
    Pod has a name of its own, so a control plane reused across runs never has it already."""
    pod = f"elb-gate-webhook-{uuid.uuid4().hex[:6]}"
    try:
        with WebhookProcess(cp, dict(env or {}), pod=pod) as hook:
            yield hook
    finally:
        cp.admin.delete("pods", SYSTEM_NAMESPACE, pod, grace_seconds=0)


class Scene:
    """One gated namespace of one test, with its submitters."""

    def __init__(self, cp: ControlPlane, hook: WebhookProcess, workdir: Path, prefix: str) -> None:
        self.cp = cp
        self.hook = hook
        self.workdir = workdir
        self.namespace = hook.install.gate(cp.new_namespace(prefix))
        self.submitters: list[Submitter] = []
        self.wait_for_pods_gone = False
        """Wait at clean-up until the namespace's Pods are gone (they hold real CPU requests)."""

    def submitter(self, user: str = "alice", source: str = "dashboard") -> Submitter:
        sub = Submitter(self.cp, self.namespace, user, self.workdir, source=source)
        self.submitters.append(sub)
        return sub

    def ready(self, body: dict, **kw: object) -> dict:
        return elb.ready(body, self.namespace, **kw)  # type: ignore[arg-type]

    def busy(self, count: int, holder: Submitter) -> list[str]:
        """``count`` searches running until deleted, opened by ``holder`` under the Lease."""
        bodies = [self.ready(b) for b in elb.busy_searches(count)]
        for applied in holder.submit(bodies):
            assert applied.ok, applied.stderr
        return [b["metadata"]["labels"]["elb-job-id"] for b in bodies]

    def close(self) -> None:
        for sub in self.submitters:
            try:
                sub.release()  # a live submit Lease is never deleted: release it first
            finally:
                sub.close()
        self.cp.admin.delete("namespaces", None, self.namespace)
        if self.wait_for_pods_gone:
            wait_until(
                lambda: not self.cp.admin.list("pods", self.namespace),
                180,
                f"the Pods of namespace {self.namespace} to be gone",
                0.5,
            )


@pytest.fixture
def scene_for(
    control_plane: ControlPlane, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[object]:
    """``scene_for(hook)``: a fresh gated namespace on ``hook``; cleaned up after the test."""
    scenes: list[Scene] = []
    prefix = request.node.originalname.removeprefix("test_").replace("_", "-")[:20].rstrip("-")

    def make(hook: WebhookProcess) -> Scene:
        scene = Scene(control_plane, hook, tmp_path, prefix or "graph")
        scenes.append(scene)
        return scene

    yield make
    for scene in scenes:
        scene.close()
