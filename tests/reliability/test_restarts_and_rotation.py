"""Promise 5: restarts and rotation under load.

While one submitter opens search after search: a webhook replica is killed (SIGKILL)
and restarted, the other replica's serving certificate is rotated on disk, and the
controller leader is killed. Only the failures ``failurePolicy: Fail`` allows occur,
the rotation needs no restart (same pid, new certificate served), a new leader takes
over and still reclaims, and the observer sees no over-admission throughout.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from cryptography import x509

from elbgate.names import lease_name
from tests.reliability.cluster import CEILING, Rig
from tests.reliability.fault_trials import hold_lease
from tests.reliability.job_completion import JobCompletion
from tests.reliability.ledger import LEDGER
from tests.reliability.observer import Observer
from tests.reliability.steady_stream import SteadyStream
from tests.support.certs import WEBHOOK_HOST
from tests.support.webhook_process import WebhookProcess, wait_until

NS = "steady"
RECLAIM_NS = "steady-reclaim"


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with Rig([NS, RECLAIM_NS], controllers=2) as started:
        started.wait_until_ready()
        yield started


def served_serial(hook: WebhookProcess) -> int:
    ctx = hook.client_context()
    with (
        socket.create_connection(("127.0.0.1", hook.port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=WEBHOOK_HOST) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def admitted_since(stream: SteadyStream, count: int, timeout: float = 60) -> None:
    """Wait until the stream got ``count`` more admissions through."""
    target = stream.stats.admitted + count
    wait_until(lambda: stream.stats.admitted >= target, timeout, f"{count} more admissions")


def test_disruptions_cost_only_what_the_failure_policy_allows(rig: Rig) -> None:
    observer = Observer(rig.emu)
    completion = JobCompletion(rig.emu).start()
    completion.add(NS, 5005)
    stream = SteadyStream(rig, NS)
    record = observer.watch(NS, {stream.username: stream}, ceiling=CEILING)
    stream.start()
    timings: dict[str, float] = {}
    try:
        admitted_since(stream, 10)

        # 1. A webhook replica dies and comes back (new ports, same certificate).
        victim = rig.hooks[0]
        assert victim.process is not None
        killed = time.monotonic()
        victim.process.kill()  # left in the endpoints until its readiness probe fails
        victim.process.wait(10)
        admitted_since(stream, 5)
        timings["webhook_first_admission_after_kill_s"] = (
            next(t for t in stream.stats.success_times if t > killed) - killed
        )
        victim.start()
        assert rig.endpoints is not None
        wait_until(lambda: all(rig.endpoints.ready), 60, "both replicas back in the endpoints")
        timings["webhook_replica_back_s"] = time.monotonic() - killed
        admitted_since(stream, 5)

        # 2. The other replica's certificate rotates on disk: served without a restart.
        survivor = rig.hooks[1]
        assert survivor.process is not None
        pid = survivor.process.pid
        rotated = time.monotonic()
        new_serial = survivor.certificate.rotate()
        wait_until(lambda: served_serial(survivor) == new_serial, 30, "the rotated certificate")
        timings["rotation_served_s"] = time.monotonic() - rotated
        assert survivor.process is not None and survivor.process.pid == pid
        assert survivor.process.poll() is None
        admitted_since(stream, 5)

        # 3. The controller leader dies: the other replica leads and still reclaims.
        leader = rig.wait_for_leader()
        killed = time.monotonic()
        leader.kill()
        successor = rig.wait_for_leader(60)
        timings["controller_new_leader_s"] = time.monotonic() - killed
        assert successor is not leader
        holder = hold_lease(rig.emu, RECLAIM_NS, "gone", seconds=1)  # expires at once
        wait_until(
            lambda: (
                not rig.emu.get("leases", RECLAIM_NS, lease_name(RECLAIM_NS))["spec"].get(
                    "holderIdentity"
                )
            ),
            30,
            f"the new leader reclaims {holder}",
        )
        timings["controller_reclaim_after_kill_s"] = time.monotonic() - killed
        admitted_since(stream, 5)
    finally:
        stats = stream.stop()
        completion.stop()
        observer.unwatch(NS)
        observer.close()
    failed = sum(stats.failures.values())
    LEDGER.record(
        "5",
        runs=stats.attempts,
        faults=3,
        violations=len(stats.unexpected) + len(record.violations),
        admissions=stats.admitted,
        searches=stats.searches,
        failed_admissions=failed,
        **{k: round(v, 2) for k, v in timings.items()},
    )
    for kind, n in stats.failures.items():
        LEDGER.record("5", **{f"failed[{kind}]": n})
    assert stats.unexpected == []
    assert record.violations == []
    assert record.max_active <= CEILING
    assert stats.searches >= 10
    assert all(n > 0 for n in rig.admissions_served())
