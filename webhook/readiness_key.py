"""The readiness key: the Lease ``elb-gate-admission`` in each gated namespace, renewed
while this replica serves admission, so a submit path can wait for it on a cold start.

Until a webhook replica is Ready the API server answers every gated write with its own
500 ``failed calling webhook`` — a text elb-gate cannot word. A client that reads this
Lease (its submitter RBAC already reads Leases in the namespace) knows instead: held and
unexpired (``renewTime + leaseDurationSeconds``) means admission is served; absent,
free or expired means it is not yet (or no longer), so wait and read again.

A replica starts renewing once the kubelet's readiness probe has been answered 200 —
the moment the kubelet marks the Pod Ready, a second or so before the API server's
endpoint view follows — and stops when ``/readyz`` fails. The Lease is outside the
Lease webhooks' ``matchConditions`` (only ``elb-blast-submit-*``), so writing it never
waits on elb-gate itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from elbgate.kube.api import LEASES, ApiError, ApiUnavailable, KubeApi, path
from elbgate.lease import format_microtime
from elbgate.logs import log
from elbgate.names import (
    ADMISSION_READY_DURATION_SECONDS,
    ADMISSION_READY_LEASE,
    ADMISSION_READY_RENEW_SECONDS,
)

_log = logging.getLogger("webhook.readiness_key")


@dataclass
class ReadinessKey:
    """Renews :data:`~elbgate.names.ADMISSION_READY_LEASE` in ``namespaces`` while
    :meth:`serving` was last called with True."""

    api: KubeApi
    namespaces: Sequence[str]
    holder: str
    """This replica (its pod name): who renewed last, for an operator reading it."""
    renew_seconds: float = ADMISSION_READY_RENEW_SECONDS
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    _serving: asyncio.Event = field(default_factory=asyncio.Event)

    def serving(self, ready: bool) -> None:
        """What the readiness probe answered (True: 200)."""
        if ready:
            self._serving.set()
        else:
            self._serving.clear()

    async def run(self) -> None:
        """Renew every ``renew_seconds`` while serving; never raises but on cancel."""
        while True:
            await self._serving.wait()
            for namespace in self.namespaces:
                try:
                    await self.renew(namespace)
                except (ApiError, ApiUnavailable):
                    pass  # the next round tries again
                except Exception as exc:  # a dead loop would read as "not serving"
                    log(
                        _log,
                        logging.ERROR,
                        "readiness key failed",
                        namespace=namespace,
                        error=repr(exc),
                    )
            await asyncio.sleep(self.renew_seconds)

    def body(self, namespace: str) -> dict[str, object]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": ADMISSION_READY_LEASE, "namespace": namespace},
            "spec": {
                "holderIdentity": self.holder,
                "leaseDurationSeconds": ADMISSION_READY_DURATION_SECONDS,
                "renewTime": format_microtime(self.clock()),
            },
        }

    async def renew(self, namespace: str) -> None:
        """One renewal: a merge patch (no resourceVersion: two replicas renewing at
        once both succeed), or a create when the Lease is not there yet."""
        body = self.body(namespace)
        url = path(LEASES, namespace, ADMISSION_READY_LEASE)
        try:
            await self.api.merge_patch(url, {"spec": body["spec"]})
        except ApiError as exc:
            if exc.code != 404:
                log(
                    _log,
                    logging.WARNING,
                    "readiness key not renewed",
                    namespace=namespace,
                    error=str(exc),
                )
                raise
            try:
                await self.api.create(path(LEASES, namespace), body)
            except ApiError as again:
                if again.code != 409:  # another replica created it first: renewed next time
                    log(
                        _log,
                        logging.WARNING,
                        "readiness key not created",
                        namespace=namespace,
                        error=str(again),
                    )
                    raise
