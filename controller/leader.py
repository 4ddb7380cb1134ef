"""Leader election on a plain Lease, client-go style, so two replicas never both act.

* acquire when the Lease is absent, free, or its record has not changed for its
  ``leaseDurationSeconds`` as timed on *this* process's monotonic clock (so replicas'
  wall clocks never need to agree); every write is a CAS on resourceVersion;
* renew every ``renew_seconds`` with one PUT of the Lease as this replica last wrote it
  (client-go's optimistic renew): a conflict means someone else wrote, and only then
  is the Lease read again; act only while
  ``monotonic() < last_successful_renew + lease_seconds - margin`` (:meth:`may_act`);
* leadership ends the moment a renew finds another holder, or the act deadline passes
  without a successful renew (a timer fires even while a renew request hangs):
  ``on_stopped`` is called at once so in-flight work is cancelled;
* :meth:`release` on shutdown frees the Lease so another replica takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from controller.metrics import ControllerMetrics
from elbgate.kube.api import LEASES, ApiError, ApiUnavailable, KubeApi, path
from elbgate.lease import format_microtime, held_spec, new_lease
from elbgate.logs import log

logger = logging.getLogger("controller.leader")


class LeaderElector:
    """Contends for ``namespace/name`` as ``identity``."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        metrics: ControllerMetrics,
        *,
        lease_seconds: float = 15.0,
        renew_seconds: float = 5.0,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not 0 < renew_seconds < lease_seconds:
            raise ValueError("need 0 < renew_seconds < lease_seconds")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.metrics = metrics
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        # client-go's renewDeadline (10 s of a 15 s lease): stop acting well before a
        # rival may take over, so two leaders never overlap.
        self.act_window = lease_seconds - max(renew_seconds, lease_seconds / 3)
        self._on_started = on_started or (lambda: None)
        self._on_stopped = on_stopped or (lambda: None)
        self._mono = monotonic
        self._wall = wall
        self._deadline: float | None = None
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self._written: dict[str, Any] | None = None
        """The Lease as this replica's last successful write left it (the API server's
        answer): a leader renews by writing it again, CAS on its resourceVersion."""
        self._timer: asyncio.TimerHandle | None = None
        self._url = path(LEASES, namespace, name)

    @property
    def leading(self) -> bool:
        return self._deadline is not None

    def may_act(self) -> bool:
        """True only while leading and inside the act deadline of the last renew."""
        return self._deadline is not None and self._mono() < self._deadline

    async def run(self) -> None:
        """Contend and renew until cancelled."""
        while True:
            started = self._mono()
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancellation that lands as the call completes, and the elector then
                # never stops (a controller that cannot be shut down).
                async with asyncio.timeout(self.renew_seconds):
                    ok = await self._try_acquire_or_renew(started)
            except TimeoutError:
                ok = False
                log(
                    logger,
                    logging.WARNING,
                    "leader Lease request timed out",
                    identity=self.identity,
                )
            except (ApiError, ApiUnavailable) as exc:
                ok = False
                self.metrics.record_api_error("update", "leases")
                log(
                    logger,
                    logging.WARNING,
                    "leader Lease request failed",
                    identity=self.identity,
                    detail=str(exc),
                )
            except Exception:  # malformed Lease etc.: never let the elector die
                ok = False
                log(
                    logger,
                    logging.ERROR,
                    "leader election error",
                    identity=self.identity,
                    exc_info=True,
                )
            if ok:
                self._renewed(started)
            elif self.leading and not self.may_act():
                self._stop("renew deadline passed")
            elapsed = self._mono() - started
            await asyncio.sleep(max(0.0, self.renew_seconds - elapsed))

    async def _try_acquire_or_renew(self, started: float) -> bool:
        if self.leading and self._written is not None:
            written, self._written = self._written, None
            renewed = {**written["spec"], "renewTime": format_microtime(self._wall())}
            body = {**written, "spec": renewed}
            if await self._write(self.api.replace(self._url, body), started):
                return True
            # Conflict: another writer changed the Lease since; read it and decide.
        obj = await self.api.get_or_none(self._url)
        moment = self._wall()
        now = format_microtime(moment)
        if obj is None:
            body = new_lease(
                self.namespace, self.name, self.identity, self._duration, moment, transitions=0
            )
            return await self._write(self.api.create(path(LEASES, self.namespace), body), started)
        spec: dict[str, Any] = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""), str(meta.get("resourceVersion")))
        if record != self._observed:
            self._observed, self._observed_at = record, started
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new_spec = self._spec(str(spec.get("acquireTime") or now), now, transitions)
        else:
            if self.leading:
                self._stop(f"Lease now held by {holder or 'nobody'}")
            duration = spec.get("leaseDurationSeconds")
            duration = duration if isinstance(duration, int) and duration > 0 else 15
            if holder and self._mono() < self._observed_at + duration:
                return False  # held, and we have not seen it go unrenewed for its duration
            new_spec = self._spec(now, now, transitions + 1)
        body = {**obj, "spec": {**spec, **new_spec}}
        return await self._write(self.api.replace(self._url, body), started)

    @property
    def _duration(self) -> int:
        return max(1, round(self.lease_seconds))

    def _spec(self, acquire: str, renew: str, transitions: int) -> dict[str, Any]:
        return held_spec(self.identity, self._duration, acquire, renew, transitions)

    async def _write(self, call: Any, started: float) -> bool:
        try:
            written = await call
        except ApiError as exc:
            if exc.conflict:  # someone else wrote first: re-observe
                return False
            raise
        if isinstance(written, dict) and isinstance(written.get("spec"), dict):
            self._written = written
            spec, meta = written["spec"], written.get("metadata") or {}
            self._observed = (
                str(spec.get("holderIdentity") or ""),
                str(spec.get("renewTime") or ""),
                str(meta.get("resourceVersion")),
            )
            self._observed_at = started
        return True

    def _renewed(self, started: float) -> None:
        was_leading = self.leading
        self._deadline = started + self.act_window
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(
            max(0.0, self._deadline - self._mono()), self._deadline_passed
        )
        if not was_leading:
            self.metrics.set_leader(True)
            log(
                logger,
                logging.INFO,
                "became leader",
                identity=self.identity,
                lease=f"{self.namespace}/{self.name}",
            )
            self._on_started()

    def _deadline_passed(self) -> None:
        if self.leading and not self.may_act():
            self._stop("renew deadline passed")

    def _stop(self, why: str) -> None:
        if not self.leading:
            return
        self._deadline = None
        self._written = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.metrics.set_leader(False)
        log(
            logger,
            logging.WARNING,
            "lost leadership; stopping all work",
            identity=self.identity,
            why=why,
        )
        self._on_stopped()

    async def release(self) -> None:
        """Give the Lease up (shutdown), so another replica need not wait for expiry."""
        if not self.leading:
            return
        self._stop("shutting down (releasing the Lease)")
        try:
            obj = await self.api.get_or_none(self._url, deadline=2.0)
            if obj is None or (obj.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = dict(obj.get("spec") or {})
            spec.update(
                holderIdentity="",
                leaseDurationSeconds=1,
                renewTime=format_microtime(self._wall()),
            )
            await self.api.replace(self._url, {**obj, "spec": spec}, deadline=2.0)
            log(logger, logging.INFO, "released leader Lease", identity=self.identity)
        except (ApiError, ApiUnavailable) as exc:
            log(
                logger,
                logging.WARNING,
                "could not release leader Lease (it will expire)",
                identity=self.identity,
                detail=str(exc),
            )
