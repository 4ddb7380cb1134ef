"""An idealised Lease client, and the same client with one real client's habit switched on.

:mod:`testbed.clients` reproduces the two existing clients as they behave on the wire.
Each departs from the protocol as elb-gate's design writes it in a few ways; this client
speaks that protocol exactly, over raw HTTPS, and each departure can be switched on
alone (:class:`Habits`), so a test can tell which of them, if any, changes an outcome:

=====================  ==================================================  ===========
habit                  what the client does                                who does it
=====================  ==================================================  ===========
``fresh_body``         acquire, renew and take over with a body built      OpenAPI
                       from scratch (holder, duration, times,
                       resourceVersion): annotations (elb-gate's stamps)
                       and ``leaseTransitions`` are dropped
``reset_acquire``      a renew sets ``acquireTime`` = now as well          both
``skew``               judges expiry on its own clock with a 30 s margin   both
``fresh_release``      releases with a body built from scratch (the        OpenAPI
                       stored times, holder ``""``)
``keeps_duration``     takes over and renews with the                      dashboard
                       ``leaseDurationSeconds`` the Lease had (the
                       previous holder's), not its own
=====================  ==================================================  ===========

The ideal client (no habit): GET; POST a new Lease when there is none; PUT of the
object it read, with itself as holder, its own ``leaseDurationSeconds`` and
``acquireTime`` = ``renewTime`` = now, to take a free or expired Lease; PUT of the
object it read with ``renewTime`` moved (and its own duration) to renew; PUT of the
object it read with holder ``""`` to release; expiry judged with no margin of its own
(its clock is the webhook's); 409 is busy. Like :mod:`testbed.clients`, nothing here
imports elb-gate.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from testbed.clients import (
    SKEW_SECONDS,
    TTL_SECONDS,
    DashboardLeaseClient,
    JsonObj,
    LeaseClient,
    micro_time,
)


@dataclass(frozen=True)
class Habits:
    """Which of the real clients' departures from the protocol to make."""

    fresh_body: bool = False
    reset_acquire: bool = False
    skew: bool = False
    fresh_release: bool = False
    keeps_duration: bool = False


OPENAPI_HABITS = Habits(fresh_body=True, reset_acquire=True, skew=True, fresh_release=True)
"""The OpenAPI service's client (:class:`~testbed.clients.OpenApiLeaseClient`), which
also speaks through kubectl and reads "busy" from its error text."""
DASHBOARD_HABITS = Habits(reset_acquire=True, skew=True, keeps_duration=True)
"""The dashboard's client (:class:`~testbed.clients.DashboardLeaseClient`)."""


class IdealLeaseClient(DashboardLeaseClient):
    """The protocol as designed, over raw HTTPS, with ``habits`` switched on."""

    source = "ideal"

    def __init__(
        self,
        server: str,
        ca_file: str,
        token: str,
        namespace: str,
        holder: str | None = None,
        *,
        habits: Habits = Habits(),
        ttl: int = TTL_SECONDS,
        clock_offset: float = 0.0,
    ) -> None:
        skew = SKEW_SECONDS if habits.skew else 0.0
        super().__init__(
            server, ca_file, token, namespace, holder, ttl=ttl, skew=skew, clock_offset=clock_offset
        )
        self.habits = habits

    def taken(self, stored: JsonObj, mine: bool) -> JsonObj:
        if self.habits.fresh_body:
            body = self.fresh_body(self.holder, stored)
            if mine and not self.habits.reset_acquire:
                body["spec"]["acquireTime"] = (stored.get("spec") or {}).get("acquireTime")
            return body
        stamp = micro_time(self.now())
        body = copy.deepcopy(stored)
        body["spec"].update(holderIdentity=self.holder, renewTime=stamp)
        if not self.habits.keeps_duration:
            body["spec"]["leaseDurationSeconds"] = self.ttl
        if not mine or self.habits.reset_acquire:
            body["spec"]["acquireTime"] = stamp
        return body

    def released(self, stored: JsonObj) -> JsonObj:
        if self.habits.fresh_release:
            return LeaseClient.released(self, stored)  # the OpenAPI client's
        return super().released(stored)
