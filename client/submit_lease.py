"""``SubmitLease``: the Gate A Lease for one submit, from synchronous code.

One object per submit attempt (its holder identity is ``<source>-<uuid4 hex>``).
All Lease operations are serialised by one lock, so the heartbeat thread can
never renew after (or race) a release. Busy is a return value; an API failure
raises :class:`CoordinationError`, so an outage is never mistaken for busy.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

from client import lease_ops
from client.errors import CoordinationError, LeaseBusy, LeaseLost
from client.lease_ops import AcquireResult, Json
from client.sync_kube import SyncKube
from elbgate.kube.api import ApiError, ApiUnavailable, KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.lease import LeaseView, new_holder_identity
from elbgate.names import lease_name
from elbgate.settings import GateSettings

T = TypeVar("T")
log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_FRACTION = 1 / 3
"""Renew every third of the TTL: two renewals may fail before the Lease expires."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class SubmitLease:
    """The submit Lease ``elb-blast-submit-<namespace>`` held by one submit attempt.

    ``with SubmitLease(ns, gate=settings.gate, config=c) as lease:`` acquires (raising
    :class:`LeaseBusy` when busy) and releases on exit. Or call :meth:`acquire`,
    :meth:`renew` and :meth:`release` directly (that is what ``run_slot`` does).
    """

    def __init__(
        self,
        namespace: str,
        *,
        gate: GateSettings,
        source: str = "cli",
        kube: SyncKube | None = None,
        config: KubeConfig | None = None,
        holder: str | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if kube is None and config is None:
            raise ValueError("SubmitLease needs a SyncKube or a KubeConfig")
        self.namespace = namespace
        self.name = lease_name(namespace)
        self.gate = gate
        """The protocol this Lease follows: its TTL, its expiry rule, the ceiling."""
        self.holder = holder or new_holder_identity(source)
        self._owns_kube = kube is None
        self.kube = kube if kube is not None else SyncKube(config)  # type: ignore[arg-type]
        self._clock = clock
        self._lock = threading.Lock()
        self._known: Json | None = None
        """The Lease as we last wrote it, while we believe we hold it."""
        self._maybe_held = False
        """A write failed with an unknown outcome: release must read before deciding."""
        self._heartbeat: Heartbeat | None = None
        self.lost = threading.Event()
        """Set when a renewal finds the Lease in someone else's hands (or free)."""

    # --- state ---------------------------------------------------------------

    @property
    def held(self) -> bool:
        """True while this object believes it holds the Lease."""
        return self._known is not None

    @property
    def view(self) -> LeaseView | None:
        """The Lease as last written by us (``None`` when not held)."""
        known = self._known
        return None if known is None else LeaseView.from_dict(known)

    # --- operations ----------------------------------------------------------

    def acquire(self) -> AcquireResult:
        """Try once: acquired, or busy (with who holds it). Raises
        :class:`CoordinationError` when the API fails or does not answer."""
        with self._lock:
            now = self._clock()
            result = self._call(
                "acquire lease",
                lambda api: lease_ops.try_acquire(
                    api,
                    self.namespace,
                    self.holder,
                    ttl_seconds=self.gate.lease_ttl_seconds,
                    expiry=self.gate.expiry,
                    now=now,
                ),
                uncertain_write=True,
            )
            if result.acquired:
                self._known = result.lease
                self._maybe_held = False
                self.lost.clear()
            return result

    def renew(self) -> None:
        """Renew our hold. Raises :class:`LeaseLost` when it is no longer ours,
        :class:`CoordinationError` on API failure (the hold may still be valid)."""
        with self._lock:
            known = self._known
            if known is None:
                raise LeaseLost(f"Lease {self.namespace}/{self.name} is not held by {self.holder}")
            now = self._clock()
            written = self._call(
                "renew lease",
                lambda api: lease_ops.renew(
                    api,
                    self.namespace,
                    self.holder,
                    known,
                    ttl_seconds=self.gate.lease_ttl_seconds,
                    now=now,
                ),
            )
            if written is None:
                self._known = None
                self.lost.set()
                raise LeaseLost(
                    f"Lease {self.namespace}/{self.name} is no longer held by {self.holder}"
                )
            self._known = written

    def release(self) -> bool:
        """Stop the heartbeat, then clear the holder if it is still us (CAS, one
        re-read on conflict). True if this call freed the Lease; False if we did
        not hold it. Raises :class:`CoordinationError` on API failure."""
        self.stop_heartbeat()
        with self._lock:
            known = self._known
            if known is None and not self._maybe_held:
                return False
            freed = self._call(
                "release lease",
                lambda api: lease_ops.release(api, self.namespace, self.holder, known),
            )
            self._known = None
            self._maybe_held = False
            return freed

    # --- heartbeat -----------------------------------------------------------

    def start_heartbeat(
        self,
        fraction: float = DEFAULT_HEARTBEAT_FRACTION,
        on_event: Callable[[str, Exception], None] | None = None,
    ) -> Heartbeat:
        """Renew every ``fraction`` x TTL in a daemon thread until :meth:`release`
        (or :meth:`stop_heartbeat`). ``on_event("lost"|"error", exc)`` reports trouble."""
        if not 0 < fraction < 1:
            raise ValueError("heartbeat fraction must be in (0, 1)")
        self.stop_heartbeat()
        beat = Heartbeat(self, self.gate.lease_ttl_seconds * fraction, on_event)
        self._heartbeat = beat
        beat.start()
        return beat

    def stop_heartbeat(self) -> None:
        """Stop renewing and wait for an in-flight renewal to finish."""
        beat, self._heartbeat = self._heartbeat, None
        if beat is not None:
            beat.stop()

    # --- plumbing ------------------------------------------------------------

    def _call(
        self,
        operation: str,
        call: Callable[[KubeApi], Coroutine[Any, Any, T]],
        uncertain_write: bool = False,
    ) -> T:
        try:
            return self.kube.run(call)
        except (ApiError, ApiUnavailable) as exc:
            if uncertain_write and isinstance(exc, ApiUnavailable):
                # The POST/PUT may have landed with its answer lost: we may hold it.
                self._maybe_held = True
            raise CoordinationError(
                f"{operation} {self.name}", self.namespace, exc, self.kube.config.host
            ) from exc

    def close(self) -> None:
        """Stop the heartbeat and close the API transport if this object made it."""
        self.stop_heartbeat()
        if self._owns_kube:
            self.kube.close()

    def __enter__(self) -> SubmitLease:
        try:
            result = self.acquire()
        except BaseException:
            self.close()
            raise
        if not result.acquired:
            self.close()
            raise LeaseBusy(f"Lease {self.namespace}/{self.name} is busy: {result.reason}")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        finally:
            self.close()


class Heartbeat(threading.Thread):
    """Renews a :class:`SubmitLease` periodically until stopped or lost."""

    def __init__(
        self,
        lease: SubmitLease,
        interval: float,
        on_event: Callable[[str, Exception], None] | None,
    ) -> None:
        super().__init__(name=f"elb-gate-heartbeat-{lease.namespace}", daemon=True)
        self.lease = lease
        self.interval = interval
        self.on_event = on_event
        self.renewals = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        wait = self.interval
        while not self._stop_event.wait(wait):
            try:
                self.lease.renew()
            except LeaseLost as exc:
                log.warning("submit lease lost: %s", exc)
                self._emit("lost", exc)
                return
            except CoordinationError as exc:
                # Transient, maybe: the hold stays valid until its expiry, so retry sooner.
                log.warning("submit lease renewal failed: %s", exc)
                self._emit("error", exc)
                wait = max(self.interval / 4, 0.5)
                continue
            self.renewals += 1
            wait = self.interval

    def _emit(self, kind: str, exc: Exception) -> None:
        if self.on_event is not None:
            try:
                self.on_event(kind, exc)
            except Exception:  # a reporting bug must not stop the renewals
                log.exception("heartbeat callback failed")

    def stop(self) -> None:
        """Ask the thread to stop and wait for it (not from the thread itself)."""
        self._stop_event.set()
        if self is not threading.current_thread() and self.is_alive():
            self.join()
