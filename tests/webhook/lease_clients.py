"""Moved to :mod:`testbed.clients`; this module only re-exports it for the callers
that have not moved yet, and goes away with them.

``RawHttpLeaseClient``/``KubectlLeaseClient`` keep their old call shape
``(target, user, namespace, holder, clock_offset=0.0)``, where ``target`` is
anything with ``ca_file``, ``token(user)`` and ``server`` (or ``url``), and for
kubectl ``kubeconfig(user)``.
"""

from __future__ import annotations

from typing import Any

from testbed.clients import (
    ClientError,
    DashboardLeaseClient,
    LeaseClient,
    OpenApiLeaseClient,
    Outcome,
)

__all__ = [
    "ClientError",
    "DashboardLeaseClient",
    "KubectlLeaseClient",
    "LeaseClient",
    "OpenApiLeaseClient",
    "Outcome",
    "RawHttpLeaseClient",
]


def RawHttpLeaseClient(  # the old class name, kept for its callers
    target: Any, user: str, namespace: str, holder: str, clock_offset: float = 0.0
) -> DashboardLeaseClient:
    """The dashboard's client (raw HTTP) as ``user`` on ``target``."""
    server = getattr(target, "server", None) or target.url
    return DashboardLeaseClient(
        server, target.ca_file, target.token(user), namespace, holder, clock_offset=clock_offset
    )


def KubectlLeaseClient(  # the old class name, kept for its callers
    target: Any, user: str, namespace: str, holder: str, clock_offset: float = 0.0
) -> OpenApiLeaseClient:
    """The OpenAPI service's client (kubectl) as ``user`` on ``target``."""
    return OpenApiLeaseClient(target.kubeconfig(user), namespace, holder, clock_offset=clock_offset)
