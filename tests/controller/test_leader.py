"""Leader election on the real API server, as the controller's ServiceAccount (RBAC as
shipped: get/update of its own Lease only): one leader, takeover, stepping down at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from controller.leader import LeaderElector
from controller.metrics import ControllerMetrics
from elbgate.kube.api import KubeApi
from testbed.api import ApiError, JsonObj
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.holders import utc
from testbed.waiting import wait_until_async

LEASE_NS, LEASE = "elb-system", "elb-gate-controller"


class Replica:
    """One elector plus a record of its leadership changes."""

    def __init__(self, api: KubeApi, name: str, lease_seconds: float = 2.0) -> None:
        self.starts = 0
        self.stops = 0
        self.elector = LeaderElector(
            api,
            LEASE_NS,
            LEASE,
            name,
            ControllerMetrics(),
            lease_seconds=lease_seconds,
            renew_seconds=0.25,
            on_started=self._started,
            on_stopped=self._stopped,
        )
        self.task: asyncio.Task[None] | None = None

    def _started(self) -> None:
        self.starts += 1

    def _stopped(self) -> None:
        self.stops += 1

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run())

    async def crash(self) -> None:
        """Stop without releasing (the process died)."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def write_between_renewals(
    control_plane: ControlPlane, change: Callable[[JsonObj], None], what: str
) -> None:
    """Read the leader Lease, ``change`` it and write it back as the administrator,
    reading it again whenever a renewal wrote in between (409)."""

    def write() -> bool:
        lease = control_plane.admin.get("leases", LEASE_NS, LEASE)
        change(lease)
        try:
            control_plane.admin.update(lease)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    await wait_until_async(write, 30, what)


@pytest.fixture
async def replicas(controller_api: KubeApi) -> AsyncIterator[tuple[Replica, Replica]]:
    a, b = Replica(controller_api, "replica-a"), Replica(controller_api, "replica-b")
    a.start()
    b.start()
    try:
        yield a, b
    finally:
        await a.crash()
        await b.crash()


async def test_exactly_one_of_two_replicas_leads(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    await wait_until_async(lambda: a.elector.may_act() or b.elector.may_act(), 30, "a leader")
    for _ in range(8):  # several renew periods: never both
        assert not (a.elector.may_act() and b.elector.may_act())
        await asyncio.sleep(0.25)
    assert a.starts + b.starts == 1


async def test_when_the_leader_dies_the_other_takes_over_after_the_lease_runs_out(
    replicas: tuple[Replica, Replica], control_plane: ControlPlane
) -> None:
    a, b = replicas
    leader = await wait_until_async(
        lambda: a if a.elector.may_act() else b if b.elector.may_act() else None, 30, "a leader"
    )
    other = b if leader is a else a
    await leader.crash()
    await wait_until_async(other.elector.may_act, 60, "the other replica leads")
    lease = control_plane.admin.get("leases", LEASE_NS, LEASE)
    assert lease["spec"]["holderIdentity"] == other.elector.identity
    assert lease["spec"]["leaseTransitions"] >= 1


async def test_a_released_lease_is_taken_over_without_waiting_for_expiry(
    controller_api: KubeApi, control_plane: ControlPlane
) -> None:
    # A 60 s Lease: the follower acquires it before a's last renewal + 60 s only if the
    # leader released it (the Lease's own times, not how long the test waited).
    a = Replica(controller_api, "replica-a", lease_seconds=60)
    b = Replica(controller_api, "replica-b", lease_seconds=60)
    a.start()
    await wait_until_async(a.elector.may_act, 60, "a leads")
    b.start()
    try:
        held = control_plane.admin.get("leases", LEASE_NS, LEASE)["spec"]
        await a.elector.release()
        await a.crash()
        assert a.stops == 1 and not a.elector.may_act()
        await wait_until_async(b.elector.may_act, 120, "b leads after a released")
        taken = control_plane.admin.get("leases", LEASE_NS, LEASE)["spec"]
        assert taken["holderIdentity"] == b.elector.identity
        assert utc(taken["acquireTime"]) < utc(held["renewTime"]) + timedelta(seconds=60)
    finally:
        await b.crash()


async def test_a_leader_steps_down_at_once_when_another_holder_appears(
    replicas: tuple[Replica, Replica], control_plane: ControlPlane
) -> None:
    a, b = replicas
    leader = await wait_until_async(
        lambda: a if a.elector.may_act() else b if b.elector.may_act() else None, 30, "a leader"
    )

    def intrude(lease: JsonObj) -> None:
        lease["spec"]["holderIdentity"] = "intruder"
        lease["spec"]["leaseDurationSeconds"] = 60

    await write_between_renewals(control_plane, intrude, "the intruder's write")
    await wait_until_async(lambda: leader.stops == 1, 30, "the leader stepped down")
    assert not a.elector.may_act() and not b.elector.may_act()


async def test_a_leader_that_cannot_renew_stops_acting_at_its_deadline(
    replicas: tuple[Replica, Replica], fault_proxy: FaultProxy
) -> None:
    a, b = replicas
    leader = await wait_until_async(
        lambda: a if a.elector.may_act() else b if b.elector.may_act() else None, 30, "a leader"
    )
    fault = fault_proxy.add(method="PUT", resource="leases", status=500, count=None)
    await wait_until_async(lambda: leader.stops == 1, 60, "the leader stopped acting")
    assert not leader.elector.may_act()
    assert fault.fired >= 1


async def test_an_elector_cancelled_just_as_its_renew_completes_still_stops(
    controller_api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The renew answer and the cancellation land in the same loop iteration. On
    # Python 3.11, asyncio.wait_for returned the answer and dropped the
    # cancellation here, so the elector (and the controller's shutdown) never ended.
    replica = Replica(controller_api, "a")
    answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def renew(_started: float) -> bool:
        return await answer

    monkeypatch.setattr(replica.elector, "_try_acquire_or_renew", renew)
    task = asyncio.create_task(replica.elector.run())
    for _ in range(5):
        await asyncio.sleep(0)  # let the elector reach its renew call
    answer.set_result(False)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=60)
    assert task in done, "the elector ignored its cancellation"
    assert task.cancelled()


async def test_a_leader_renews_with_one_write_and_reads_only_after_a_conflict(
    controller_api: KubeApi, fault_proxy: FaultProxy, control_plane: ControlPlane
) -> None:
    # client-go's optimistic renew: the leader writes the Lease it last wrote (CAS on
    # its resourceVersion) and reads the Lease only when that write conflicts.
    replica = Replica(controller_api, "replica-a", lease_seconds=60)
    replica.start()
    try:
        await wait_until_async(replica.elector.may_act, 30, "a leads")
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE}"
        mark = len(fault_proxy.requests)

        def renewals(method: str) -> int:
            return sum(1 for m, p in fault_proxy.requests[mark:] if (m, p) == (method, lease_path))

        await wait_until_async(lambda: renewals("PUT") >= 4, 30, "four renewals")
        assert renewals("GET") == 0, fault_proxy.requests[mark:]

        # Another writer changes the Lease without taking it: the next renew conflicts,
        # reads the Lease once, finds itself still the holder and renews from there.
        def touch(lease: JsonObj) -> None:
            lease["metadata"].setdefault("labels", {})["touched"] = "by-someone-else"

        await write_between_renewals(control_plane, touch, "another writer's write")
        puts = renewals("PUT")
        await wait_until_async(lambda: renewals("GET") >= 1, 30, "a read after the conflict")
        await wait_until_async(
            lambda: renewals("PUT") >= puts + 3, 30, "renewals after the conflict"
        )
        assert replica.elector.may_act() and replica.starts == 1 and replica.stops == 0
        assert renewals("GET") == 1, fault_proxy.requests[mark:]
        renewed = control_plane.admin.get("leases", LEASE_NS, LEASE)
        assert renewed["metadata"]["labels"]["touched"] == "by-someone-else"
        assert renewed["spec"]["holderIdentity"] == "replica-a"
    finally:
        await replica.crash()
