"""Promise 5: restarts and rotation under load.

While one submitter opens search after search: a webhook replica is killed (SIGKILL)
and restarted, the other replica's serving certificate is rotated on disk, and the
controller leader is killed. Only the failures ``failurePolicy: Fail`` allows occur,
the rotation needs no restart (same pid, new certificate served), a new leader takes
over and still reclaims, and the observer (its own oracle, and the census beside it)
sees no over-admission and no disagreement throughout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from elbgate.names import lease_name
from testbed.clients import DashboardLeaseClient
from testbed.controlplane import ControlPlane
from testbed.reliability.ledger import LEDGER
from testbed.reliability.observer import Observer
from testbed.reliability.rig import CEILING, Rig
from testbed.reliability.steady_stream import SteadyStream
from testbed.waiting import wait_until
from tests.webhook.test_tls_reload import served_serial


@pytest.fixture(scope="module")
def namespaces(control_plane: ControlPlane) -> tuple[str, str]:
    return control_plane.new_namespace("steady"), control_plane.new_namespace("steady-reclaim")


@pytest.fixture(scope="module")
def rig(control_plane: ControlPlane, namespaces: tuple[str, str]) -> Iterator[Rig]:
    with Rig(control_plane, namespaces, controllers=2) as started:
        started.wait_until_ready()
        yield started


def admitted_since(stream: SteadyStream, count: int, timeout: float = 120) -> None:
    """Wait until the stream got ``count`` more admissions through."""
    target = stream.stats.admitted + count
    wait_until(lambda: stream.stats.admitted >= target, timeout, f"{count} more admissions")


def abandoned_lease(rig: Rig, namespace: str) -> str:
    """bob takes the Lease for 1 s and never comes back (no pod stamp: only expiry frees it)."""
    bob = DashboardLeaseClient.on(rig.cp, "bob", namespace, ttl=1)
    assert bob.acquire() == "acquired", bob.last_answer
    return bob.holder


def test_disruptions_cost_only_what_the_failure_policy_allows(
    rig: Rig, namespaces: tuple[str, str]
) -> None:
    ns, reclaim_ns = namespaces
    observer = Observer(rig.cp.admin, [ns]).start()
    record = observer.watch(ns)
    stream = SteadyStream(rig.cp, ns).start()
    assert rig.service is not None
    service = rig.service
    timings: dict[str, float] = {}
    try:
        admitted_since(stream, 10)

        # 1. A webhook replica dies and comes back (new ports, same certificate).
        victim = rig.hooks[0]
        killed = time.monotonic()
        victim.kill()  # left in the Service until its readiness probe fails
        admitted_since(stream, 5)
        timings["webhook_first_admission_after_kill_s"] = (
            next(t for t in stream.stats.success_times if t > killed) - killed
        )
        victim.start()
        wait_until(service.all_ready, 90, "both replicas back in the Service")
        timings["webhook_replica_back_s"] = time.monotonic() - killed
        admitted_since(stream, 5)

        # 2. The other replica's certificate rotates on disk: served without a restart.
        survivor = rig.hooks[1]
        assert survivor.process is not None
        pid = survivor.process.pid
        rotated = time.monotonic()
        new_serial = survivor.certificate.rotate()
        wait_until(lambda: served_serial(survivor) == new_serial, 60, "the rotated certificate")
        timings["rotation_served_s"] = time.monotonic() - rotated
        assert survivor.process is not None and survivor.process.pid == pid
        assert survivor.process.poll() is None
        admitted_since(stream, 5)

        # 3. The controller leader dies: the other replica leads and still reclaims.
        leader = rig.wait_for_leader()
        killed = time.monotonic()
        leader.kill()
        successor = rig.wait_for_leader(120)
        timings["controller_new_leader_s"] = time.monotonic() - killed
        assert successor is not leader
        holder = abandoned_lease(rig, reclaim_ns)
        wait_until(
            lambda: (
                not rig.cp.admin.get("leases", reclaim_ns, lease_name(reclaim_ns))["spec"].get(
                    "holderIdentity"
                )
            ),
            60,
            f"the new leader reclaims {holder}",
        )
        timings["controller_reclaim_after_kill_s"] = time.monotonic() - killed
        admitted_since(stream, 5)
    finally:
        stats = stream.stop()
        observer.sync()
        observer.unwatch(ns)
        observer.stop()
    failed = sum(stats.failures.values())
    served = rig.admissions_served()
    LEDGER.record(
        "5",
        runs=stats.attempts,
        faults=3,
        violations=len(stats.unexpected) + len(record.violations) + record.disagreement_count,
        admissions=stats.admitted,
        searches=stats.searches,
        failed_admissions=failed,
        job_events_checked=record.job_events,
        replica_a_admissions_since_restart=served[0],
        replica_b_admissions=served[1],
        **{k: round(v, 2) for k, v in timings.items()},
    )
    for kind, n in stats.failures.items():
        LEDGER.record("5", **{f"failed[{kind}]": n})
    assert stats.unexpected == []
    assert record.violations == []
    assert record.disagreements == []
    assert record.max_active <= CEILING
    assert stats.searches >= 10
    # Which replica answers is the API server's choice: it keeps its connections to the
    # survivor while the other restarts, as it does to a Service's endpoints.
    assert sum(served) > 0
