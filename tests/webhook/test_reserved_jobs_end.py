"""A reserved Job stops counting once it is seen stored, so a search that ran and was
deleted before any other admission read it frees its slot at once.

The admission record keeps each admitted first Job until a consistent read shows it
(docs/design.md, "Admission is linearizable"). Reads made only by later admissions
leave a gap: a search whose Jobs finish and are TTL-deleted before the next judged
admission was never seen by one, and its entry held a slot until it expired (120 s),
refusing a real search with "Gate B: 3/3" while two ran. The admitting replica now
confirms the Job stored itself and drops the entry.
"""

from __future__ import annotations

import json

from elbgate.names import ADMISSION_RECORD_CONFIGMAP, ADMISSION_RECORD_KEY
from testbed import elastic_blast as elb
from testbed.clients import OpenApiLeaseClient
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from tests.webhook.races import HOLDER


def reserved(cp: ControlPlane, namespace: str) -> list[str]:
    """The names of the Jobs the namespace's admission record holds reserved."""
    record = cp.admin.find("configmaps", namespace, ADMISSION_RECORD_CONFIGMAP)
    if record is None:
        return []
    entries = json.loads((record.get("data") or {}).get(ADMISSION_RECORD_KEY) or "[]")
    return [str(e["job"]) for e in entries]


def test_a_search_deleted_before_any_other_admission_read_it_frees_its_slot(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    cp = control_plane
    namespace = cp.new_namespace("reserved-ends")
    for _ in range(2):  # two searches running before the namespace is gated
        cp.admin.create(elb.ready(elb.blast_batch(elb.search_id(), 0), namespace))
    hook.install.gate(namespace)
    assert OpenApiLeaseClient.on(cp, "alice", namespace, holder=HOLDER).acquire() == "acquired"

    third = elb.for_api(elb.submit_jobs(elb.search_id()), namespace)
    cp.api("alice").create(third)  # the third active search: admitted and reserved
    name = third["metadata"]["name"]
    wait_until(
        lambda: name not in reserved(cp, namespace),
        60,
        f"the record to drop {name} once it is stored",
        detail=lambda: f"reserved: {reserved(cp, namespace)}",
    )
    # It ran and was deleted (TTL) before any other admission read the namespace.
    cp.admin.delete("jobs", namespace, name)
    wait_until(lambda: cp.admin.find("jobs", namespace, name) is None, 60, f"{name} deleted")

    fourth = elb.for_api(elb.submit_jobs(elb.search_id()), namespace)
    cp.api("alice").create(fourth)  # two searches run: admitted, not "Gate B: 3/3"
    assert cp.admin.find("jobs", namespace, fourth["metadata"]["name"]) is not None
