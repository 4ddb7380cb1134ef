"""The submit-path client: take the Gate A Lease, check capacity, run the submit.

A submit path (the dashboard's Celery task, the OpenAPI service, an operator at
a terminal) uses this instead of its own Lease and count logic::

    from elbgate.client import SubmitLease, run_slot
    lease = SubmitLease(namespace, settings=settings, config=KubeConfig.load(), source="dashboard")
    try:
        with run_slot(lease, settings, on_state=print) as slot:
            run_elastic_blast_submit(timeout=settings.effective_exec_timeout_seconds)
    finally:
        lease.close()
"""

from elbgate.client.errors import (
    CapacityTimeout,
    CoordinationError,
    LeaseBusy,
    LeaseLost,
    SlotCancelled,
    SlotUnavailable,
    SubmitSlotTimeout,
)
from elbgate.client.lease_ops import AcquireResult
from elbgate.client.observe import read_census, read_lease
from elbgate.client.slot import Slot, SlotEvent, run_slot
from elbgate.client.slot_machine import Phase
from elbgate.client.submit_lease import Heartbeat, SubmitLease
from elbgate.client.sync_kube import SyncKube

__all__ = [
    "AcquireResult",
    "CapacityTimeout",
    "CoordinationError",
    "Heartbeat",
    "LeaseBusy",
    "LeaseLost",
    "Phase",
    "Slot",
    "SlotCancelled",
    "SlotEvent",
    "SlotUnavailable",
    "SubmitLease",
    "SubmitSlotTimeout",
    "SyncKube",
    "read_census",
    "read_lease",
    "run_slot",
]
