"""A steady stream of admissions and Lease renewals, counted by outcome, while
something happens to elb-gate (an upgrade, a killed Pod, a drained node)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from testbed import elastic_blast as elb
from testbed.api import ApiError
from testbed.clients import OpenApiLeaseClient, micro_time
from testbed.system_tier import SystemTier

DENIED = 'admission webhook "search-admission.elb-gate.io" denied the request: '
HOLDER = "openapi-5b0f6c2d9e8a4f7b8c1d2e3f4a5b6c7d"


@dataclass
class Load:
    """Two threads against one gated namespace: bob's finalizer create (the webhook
    must answer Gate A's denial) and alice's renewal of the submit Lease she holds
    (the Lease guard must admit it). Anything else is a failed admission."""

    tier: SystemTier
    namespace: str
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        lease = OpenApiLeaseClient.on(self.tier.cp, "alice", self.namespace, holder=HOLDER)
        if (
            lease.get() is None
            or (lease.get() or {}).get("spec", {}).get("holderIdentity") != HOLDER
        ):
            assert lease.acquire() == "acquired", lease.last_stderr
        for target in (self._admissions, self._renewals):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _record(self, kind: str, outcome: str, detail: str = "") -> None:
        self.outcomes[f"{kind}:{outcome}"] += 1
        if outcome == "failed":
            self.failures.append(f"{datetime.now(UTC):%H:%M:%S.%f} {kind}: {detail}")

    def _admissions(self) -> None:
        bob = self.tier.cp.api("bob")
        while not self._stop.is_set():
            try:
                bob.create(elb.ready(elb.finalizer(elb.search_id()), self.namespace))
                self._record("admission", "failed", "bob's finalizer was admitted")
            except ApiError as e:
                if e.status == 403 and DENIED in e.message:
                    self._record("admission", "answered")
                else:
                    self._record("admission", "failed", f"{e.status} {e.message}")
            except Exception as e:  # a transport error is a failed admission too
                self._record("admission", "failed", repr(e))
            time.sleep(0.1)

    def _renewals(self) -> None:
        alice = self.tier.cp.api("alice")
        name = f"elb-blast-submit-{self.namespace}"
        while not self._stop.is_set():
            try:
                lease = alice.get("leases", self.namespace, name)
                lease["spec"]["renewTime"] = micro_time(datetime.now(UTC))
                alice.update(lease)
                self._record("renewal", "answered")
            except ApiError as e:
                if e.status == 409:
                    self._record("renewal", "conflict")
                else:
                    self._record("renewal", "failed", f"{e.status} {e.message}")
            except Exception as e:
                self._record("renewal", "failed", repr(e))
            time.sleep(0.5)

    @property
    def failed(self) -> int:
        return sum(v for k, v in self.outcomes.items() if k.endswith(":failed"))

    def summary(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items()))
