"""The submit-path client: take the Gate A Lease, check capacity, run the submit.

The library a submit path imports, and under :mod:`client.cli` the ``elb-gate``
command built on it (``python -m client`` is the same command).

A submit path (the dashboard's Celery task, the OpenAPI service, an operator at
a terminal) uses this instead of its own Lease and count logic::

    from client import SubmitLease, run_slot
    from elbgate.settings import Settings
    settings = Settings.from_env(os.environ)
    lease = SubmitLease(namespace, gate=settings.gate, config=KubeConfig.load(), source="dashboard")
    try:
        with run_slot(lease, settings.client, on_state=print) as slot:
            run_elastic_blast_submit(
                timeout=settings.client.effective_exec_timeout_seconds(settings.gate)
            )
    finally:
        lease.close()
"""

from client.errors import (
    CapacityTimeout,
    CoordinationError,
    LeaseBusy,
    LeaseLost,
    SlotCancelled,
    SlotUnavailable,
    SubmitSlotTimeout,
)
from client.lease_ops import AcquireResult
from client.observe import read_census, read_lease
from client.slot import Slot, SlotEvent, run_slot
from client.slot_machine import Phase
from client.submit_lease import Heartbeat, SubmitLease
from client.sync_kube import SyncKube

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
