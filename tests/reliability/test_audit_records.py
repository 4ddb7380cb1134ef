"""What the API server's audit log records of the writes a watch sees: the facts the
Gate A judge (``testbed.reliability.gate_a``) stands on, checked on the real API server.

Every create, update and patch is recorded with the object as committed, so at the
revision the watch saw. A DELETE of a Lease is answered with a ``Status``: its record
names the object's ``uid`` and who deleted it, but no revision; the watch's ``DELETED``
event carries the revision it committed at, so the judge pairs the two by ``uid``.
"""

from __future__ import annotations

from typing import Any

from testbed.controlplane import ControlPlane
from testbed.reliability.audit import AuditTail, Seen
from testbed.waiting import wait_until
from testbed.watch import Watch


def test_a_lease_deleted_is_recorded_by_uid_and_placed_at_the_watchs_revision(
    control_plane: ControlPlane,
) -> None:
    admin = control_plane.admin
    ns = control_plane.new_namespace("audit")
    tail = AuditTail(control_plane.audit_log, [ns])
    tail.skip_to_end()
    seen: list[tuple[str, int, str]] = []

    def on_event(kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("namespace") == ns:
            seen.append((kind, int(meta["resourceVersion"]), str(meta["uid"])))

    watch = Watch(admin, "leases", on_event, stream_seconds=5).start()
    try:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
        admin.create({**body, "metadata": {"name": "l", "namespace": ns}, "spec": {}})
        admin.patch("leases", ns, "l", {"spec": {"holderIdentity": "a-1"}})
        admin.delete("leases", ns, "l")
        wait_until(lambda: [k for k, _, _ in seen] == ["ADDED", "MODIFIED", "DELETED"], 60,
                   "the watch to deliver the create, the patch and the delete")  # fmt: skip
    finally:
        watch.stop()
    (_, created, uid), (_, patched, _), (_, deleted, gone) = seen
    assert gone == uid and created < patched < deleted

    watched = [Seen(created, "leases", "l", None, {}), Seen(patched, "leases", "l", created, {})]

    def recorded() -> bool:
        tail.poll()
        return tail.account(ns, watched, {uid: deleted})[1:] == (set(), set())

    wait_until(recorded, 60, "the audit log to record the three writes")
    assert deleted not in {w.rv for w in tail.writes[ns]}  # its record carries no revision
    writes, _, _ = tail.account(ns, watched, {uid: deleted})
    assert [(w.verb, w.rv) for w in writes] == [
        ("create", created),
        ("patch", patched),
        ("delete", deleted),
    ]
    assert writes[2].user == writes[0].user and writes[2].uid == uid
