"""A Lease admission request (CREATE, UPDATE or DELETE), as the stamp and the guard read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elbgate.lease import LeaseView
from webhook.requester import Requester
from webhook.review import AdmissionRequest


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """One write to a Lease: the new object (``None`` on DELETE), the stored one
    (``None`` on CREATE) and who asks."""

    operation: str
    namespace: str
    name: str
    obj: Mapping[str, Any] | None
    new: LeaseView | None
    old: LeaseView | None
    requester: Requester
    old_version: str = ""
    """``oldObject``'s resourceVersion: the stored Lease this write replaces."""

    @classmethod
    def from_admission(cls, req: AdmissionRequest) -> LeaseRequest:
        name = req.name
        if not name:
            for obj in (req.obj, req.old_object):
                name = str(((obj or {}).get("metadata") or {}).get("name") or "")
                if name:
                    break
        return cls(
            operation=req.operation,
            namespace=req.namespace,
            name=name,
            obj=req.obj,
            new=LeaseView.from_dict(req.obj) if req.obj is not None else None,
            old=LeaseView.from_dict(req.old_object) if req.old_object is not None else None,
            requester=Requester.from_user_info(req.user),
            old_version=str(
                ((req.old_object or {}).get("metadata") or {}).get("resourceVersion") or ""
            ),
        )

    @property
    def ref(self) -> str:
        """``<namespace>/<name>``, as denials name the Lease."""
        return f"{self.namespace}/{self.name}"
