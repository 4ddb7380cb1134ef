"""Waiters on the real control plane: the one that waited longest takes a freed slot, the
moment it frees, and the others do not rush the Lease.

Three ``run_slot`` waiters (the library ``elb-gate submit`` runs) queue in a namespace
whose three slots are taken by searches whose pods run until deleted. Each time a search
is deleted, one slot frees: the head of the line takes it and, like a real submit,
creates its own search's Job (the namespace is full again) before releasing the Lease.
The fallback poll is set far beyond the test, so every try is one the watches caused.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

import pytest

from client import AcquireResult, SubmitLease, run_slot
from client.waiting_room import WaitingRoom
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from testbed.controlplane import ControlPlane
from testbed.install import Installation
from testbed.waiting import wait_until

STEP_SECONDS = 5.0
"""Generous, so the head of the line always wins on a busy machine (1 s by default)."""
POLL_SECONDS = 600.0
"""No fallback poll within the test: every try is caused by what the watches saw."""
SETTINGS = Settings.from_env({"BLAST_MAX_RUN_CONCURRENCY": "3"})


def blast_job(ns: str, job_id: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"blast-{job_id}",
            "namespace": ns,
            "labels": {"app": "blast", "elb-job-id": job_id},
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "blast", "elb-job-id": job_id}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "blast",
                            "image": "ncbi/elb:1.4.0",
                            "resources": {"requests": {"cpu": "10m"}},
                        }
                    ],
                },
            },
        },
    }


class CountingLease(SubmitLease):
    """A SubmitLease that counts its tries."""

    tries = 0

    def acquire(self) -> AcquireResult:
        self.tries += 1
        return super().acquire()


@dataclass
class Waiter:
    name: str
    lease: CountingLease
    room: WaitingRoom
    won: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)


def in_line(waiter: Waiter, position: int) -> bool:
    return waiter.room.position() == position


def watching(waiter: Waiter) -> bool:
    return waiter.room.watching


@pytest.fixture
def namespace(control_plane: ControlPlane) -> str:
    ns = control_plane.new_namespace("handoff")
    # A submitter's rights there (no gated label: no webhook, the clients alone).
    Installation.on(control_plane).gate(ns, label=False)
    for n in range(3):
        control_plane.admin.create(blast_job(ns, f"running-{n}"))
    return ns


@pytest.fixture
def waiters(control_plane: ControlPlane, namespace: str) -> Iterator[list[Waiter]]:
    config = KubeConfig.from_kubeconfig(control_plane.kubeconfig(control_plane.plain_user()))
    made: list[Waiter] = []
    stop = threading.Event()
    threads = []
    for n in range(3):
        lease = CountingLease(namespace, gate=SETTINGS.gate, config=config, source="cli")
        room = WaitingRoom(lease.kube, namespace, lease.holder, SETTINGS.gate, step=STEP_SECONDS)
        waiter = Waiter(f"waiter-{n}", lease, room)
        made.append(waiter)

        def run(w: Waiter = waiter) -> None:
            try:
                with run_slot(
                    w.lease,
                    SETTINGS.client,
                    cancel=stop,
                    poll_seconds=POLL_SECONDS,
                    waiting_room=w.room,
                ):
                    control_plane.admin.create(blast_job(namespace, w.name))
                    w.won.set()
            except BaseException as exc:
                w.errors.append(exc)
            finally:
                w.lease.close()

        thread = threading.Thread(target=run, name=waiter.name, daemon=True)
        thread.start()
        threads.append(thread)
        # Queue one after the other, each behind the ones already in line.
        wait_until(partial(in_line, waiter, n), 60, f"{waiter.name} in line")
    for w in made:
        wait_until(partial(watching, w), 60, f"{w.name} watching")
    yield made
    stop.set()
    for thread in threads:
        thread.join(30)
    assert [w.errors for w in made] == [[], [], []]


def test_each_freed_slot_goes_to_the_waiter_that_waited_longest(
    control_plane: ControlPlane, namespace: str, waiters: list[Waiter]
) -> None:
    for n, waiter in enumerate(waiters):
        control_plane.admin.delete("jobs", namespace, f"blast-running-{n}", grace_seconds=0)
        wait_until(waiter.won.is_set, 60, f"{waiter.name} to take the freed slot")
        later = waiters[n + 1 :]
        assert not any(w.won.is_set() for w in later)
        assert [w.room.position() for w in later] == list(range(len(later)))


def test_a_freed_slot_wakes_one_try_not_one_per_waiter(
    control_plane: ControlPlane, namespace: str, waiters: list[Waiter]
) -> None:
    # Each waiter tried once on arrival (found the namespace full) and once in its turn.
    for n, waiter in enumerate(waiters):
        control_plane.admin.delete("jobs", namespace, f"blast-running-{n}", grace_seconds=0)
        wait_until(waiter.won.is_set, 60, f"{waiter.name} to take the freed slot")
    assert [w.lease.tries for w in waiters] == [2, 2, 2]
    assert [w.room.wakeups for w in waiters] == [1, 1, 1]
    entries = control_plane.admin.list(
        "leases", namespace, label_selector="elb-gate.io/waiting-for=submit"
    )
    assert entries == []  # everyone left the line


def test_an_identity_that_may_not_watch_or_queue_still_gets_its_slot_by_polling(
    control_plane: ControlPlane,
) -> None:
    # Only what elb-gate submit needed before it watched (docs/cli.md): get/create/update
    # on leases, list on jobs; nobody else is granted anything there.
    cp = control_plane
    namespace = cp.new_namespace("handoff-rbac")
    Installation.on(cp).gate(namespace, label=False, open_to_all=False)
    for n in range(3):
        cp.admin.create(blast_job(namespace, f"running-{n}"))
    user = cp.plain_user()
    cp.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "submit-minimal", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                },
                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
            ],
        }
    )
    cp.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "submit-minimal", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "submit-minimal",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )
    config = KubeConfig.from_kubeconfig(cp.kubeconfig(user))
    lease = SubmitLease(namespace, gate=SETTINGS.gate, config=config, source="cli")
    room = WaitingRoom(lease.kube, namespace, lease.holder, SETTINGS.gate)
    won = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with run_slot(lease, SETTINGS.client, poll_seconds=1.0, waiting_room=room):
                won.set()
        except BaseException as exc:
            errors.append(exc)
        finally:
            lease.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: len(room.blind) == 3, 60, "the waiter to find it may not watch")
    assert room.position() is None and not room.watching  # blind and unqueued
    cp.admin.delete("jobs", namespace, "blast-running-0", grace_seconds=0)
    wait_until(won.is_set, 60, "the slot, found by polling")
    thread.join(30)
    assert errors == []
