"""The reliability runs' configuration of the rig (:class:`testbed.rig.Rig`).

Two real ``python -m webhook`` replicas, each with a certificate of its own
(``caBundle`` then carries every CA), behind one Service address, and one or more
real ``python -m controller`` replicas, all with :data:`SHARED_ENV`: short TTLs and
deadlines so that reclaims and fail-closed answers come within seconds. Either
component can be put behind a :class:`~testbed.faultproxy.FaultProxy`.

The fast tier is enough here: the reliability runs judge decisions and their races
under injected faults, which need thousands of schedules, not a container runtime;
what a kubelet does to an install (probes, restarts, OOM, drains) is tests/system/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from queue import Queue
from typing import Any, TypeVar

from elbgate.names import ADMISSION_RECORD_CONFIGMAP
from testbed import rig
from testbed.controlplane import ControlPlane

SHARED_ENV: dict[str, str] = {
    "BLAST_MAX_RUN_CONCURRENCY": "2",
    "BLAST_SUBMIT_LEASE_TTL_SECONDS": "5",
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": "1",
    "ELB_GATE_LEASE_MIN_DURATION_SECONDS": "1",
    "ELB_GATE_API_TIMEOUT_SECONDS": "2",
    "ELB_GATE_HOLDER_NODE_NOT_READY_SECONDS": "2",
    "CELERY_TASK_SOFT_TIME_LIMIT": "3300",
    "CELERY_TASK_TIME_LIMIT": "3600",
}
"""Settings every component of the rig shares: ceiling 2 (more contention than 3), a
5 s default Lease TTL with 1 s skew, short enough that a holder crashed without a pod
stamp is reclaimed within seconds; a holder on a not-Ready node is gone after 2 s; and a
2 s API deadline inside the configurations' 5 s webhook timeout."""

CEILING = int(SHARED_ENV["BLAST_MAX_RUN_CONCURRENCY"])
TTL_SECONDS = int(SHARED_ENV["BLAST_SUBMIT_LEASE_TTL_SECONDS"])
SKEW_SECONDS = float(SHARED_ENV["BLAST_LEASE_CLOCK_SKEW_SECONDS"])
CONTROLLER_SKEW_SECONDS = 3
CONTROLLER_ENV: dict[str, str] = {
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": str(CONTROLLER_SKEW_SECONDS),
    # Settings derive a submit's exec deadline from TTL - 2 x skew, which a 3 s skew
    # makes negative; the controller runs no submit, so any valid value does.
    "ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS": "4",
}
"""The race rig's controller reads expiry with a 2 s wider margin than the webhook and
the submitters, as a controller whose clock runs up to 2 s behind theirs would: Gate A
needs no controller, and for those 2 s after a hold expires only a waiting submitter can
take it over. Without it the controller, which looks again at the exact expiry, clears
nearly every expired hold itself and the takeover of an expired hold is never shown."""
T = TypeVar("T")
R = TypeVar("R")
FINALIZER_GRACE_SECONDS = 300.0
"""The default grace (BLAST_FINALIZER_GRACE_SECONDS is not overridden by the race rig)."""


class Rig(rig.Rig):
    """The rig with :data:`SHARED_ENV` under every component (``env`` on top of it), each
    webhook replica serving a certificate of its own."""

    def __init__(
        self,
        cp: ControlPlane,
        namespaces: Iterable[str],
        *,
        env: Mapping[str, str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(
            cp,
            namespaces,
            env={**SHARED_ENV, **(env or {})},
            shared_certificate=False,
            effective_seconds=120.0,
            **options,
        )

    def reset_namespace(self, namespace: str, timeout: float = 120.0) -> None:
        """Empty a namespace for the next run, as a fresh one: also no admission record
        of the last run's Jobs (one deleted before any census LIST showed it stays
        reserved there for a while, holding a slot: an over-count the design accepts)."""
        super().reset_namespace(namespace, timeout)
        self.cp.admin.delete("configmaps", namespace, ADMISSION_RECORD_CONFIGMAP)


def each_on_a_slot(
    items: Iterable[T],
    slots: Sequence[str],
    run: Callable[[T, str], R],
    on_error: Callable[[T, Exception], None] | None = None,
) -> Iterator[R]:
    """``run(item, slot)`` for every item, one at a time in each namespace slot, yielding
    each result as it ends: a slot freed starts the next item at once.

    An item the harness could not finish (a wait that timed out, an API call that
    failed) is handed to ``on_error`` and the others go on; without ``on_error`` the
    first such error is raised once the others have run."""
    free: Queue[str] = Queue()
    for slot in slots:
        free.put(slot)

    def on_slot(item: T) -> R:
        slot = free.get()
        try:
            return run(item, slot)
        finally:
            free.put(slot)

    errors: list[Exception] = []
    failed = on_error or (lambda _item, exc: errors.append(exc))
    pool = ThreadPoolExecutor(max_workers=len(slots))
    try:
        futures = {pool.submit(on_slot, item): item for item in items}
        for done in as_completed(futures):
            try:
                result = done.result()
            except Exception as exc:
                failed(futures[done], exc)
                continue
            yield result
    finally:  # interrupted: finish the runs under way, start no other
        pool.shutdown(wait=True, cancel_futures=True)
    if errors:
        raise errors[0]
