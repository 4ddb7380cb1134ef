"""Writing the namespace survives a write that was stored though its client never learnt
it: on a loaded machine the API server can answer a create with a 504 after storing the
Job, or the connection closes before the answer, and the retry then meets the Job (409).
No timed assertions."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from bench.cluster import BenchCluster
from bench.namespace_jobs import planned_jobs
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy


@dataclass(frozen=True)
class _ThroughProxy:
    """What the fill uses of the control plane (address, CA, the admin's token), with
    its requests sent through the fault proxy."""

    server: str
    ca_file: str
    cp: ControlPlane

    def token(self, user: str) -> str:
        return self.cp.token(user)


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy(control_plane) as running:
        yield running


def test_a_create_and_a_status_write_stored_before_their_answer_are_taken_as_written(
    control_plane: ControlPlane, proxy: FaultProxy, tmp_path: Path
) -> None:
    """The proxy forwards the first create and the first status write, then closes the
    connection without their answers: the retried create is answered 409 AlreadyExists,
    the retried status write 409 Conflict (its resourceVersion was taken by the first).
    The fill ends with every Job written, in its planned state."""
    namespace = control_plane.new_namespace("fill")
    cluster = BenchCluster(tmp_path, cpu=None)
    cluster.cp = cast(ControlPlane, _ThroughProxy(proxy.url, proxy.ca_file, control_plane))
    post = proxy.add(method="POST", resource="jobs", namespace=namespace, lose_answer=True)
    put = proxy.add(method="PUT", resource="jobs", namespace=namespace, lose_answer=True)

    assert cluster.fill(namespace, 30) == 30

    assert post.fired == 1 and put.fired == 1
    for job in planned_jobs(30):
        stored = control_plane.admin.get("jobs", namespace, job.name)
        status = stored.get("status") or {}
        if job.state == "succeeded":
            assert status.get("succeeded") == 1, job.name
        elif job.state == "running":
            assert status.get("active") == 1, job.name
