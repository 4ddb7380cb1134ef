"""**observe** → plan → apply, per namespace, on cache changes and on a periodic resync.

Level-based: every reconcile re-derives everything from the cache and the holder-pod
watches (plus one pod GET to confirm a stamped pod is really gone or replaced before the
plan may act on it), so a missed event is repaired by the next resync. A namespace whose
cache is not synced is skipped. Only the leader applies; every replica plans, so
``/liveness`` and the gauges are served by both. A plan's ``look_again_at`` schedules the
namespace's next reconcile, so a deadline never waits for the resync.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from controller.apply import Applier, Outcome
from controller.cache import Cache
from controller.history import look_up_all
from controller.holder_watch import HolderWatches
from controller.holders import PodSeen, PodView
from controller.liveness import LivenessView
from controller.metrics import ControllerMetrics
from controller.plan import Plan, make_plan
from controller.reclaim import holder_pod_to_check
from elbgate.kube.api import PODS, ApiError, ApiUnavailable, KubeApi, path
from elbgate.lease import LeaseView
from elbgate.logs import log
from elbgate.settings import ControllerSettings, GateSettings

logger = logging.getLogger("controller.reconciler")

DEBOUNCE_SECONDS = 0.05
"""Coalesce a burst of watch events (a LIST's worth, a search's Jobs) into one reconcile."""
REQUEUE_AFTER_CONFLICT = 0.5
RETRY_CONFIRM_SECONDS = 1.0
"""A holder pod the watch calls gone, whose confirming GET failed, is looked at again after
this long (not at the resync: a reclaim follows its evidence within 15 s)."""
LOOK_AGAIN_SLACK_SECONDS = 0.05
"""Wake this long after a deadline, so the plan made then sees it passed."""


class Reconciler:
    """Runs reconciles; holds the latest plan outcome of each namespace for readers."""

    def __init__(
        self,
        gate: GateSettings,
        controller: ControllerSettings,
        cache: Cache,
        api: KubeApi,
        applier: Applier,
        metrics: ControllerMetrics,
        may_act: Callable[[], bool],
        clock: Callable[[], datetime],
        holders: HolderWatches | None = None,
    ) -> None:
        self.gate = gate
        self.controller = controller
        self.holders = holders
        """The holder-pod watches (``None``: every pod is looked up with a GET instead)."""
        self.cache = cache
        self.api = api
        self.applier = applier
        self.metrics = metrics
        self.may_act = may_act
        self.clock = clock
        self.views: dict[str, LivenessView] = {}
        self._last_seen_active: dict[str, datetime] = {}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._inflight: asyncio.Task[None] | None = None
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}

    # -- triggers ------------------------------------------------------------

    def mark_dirty(self, namespace: str) -> None:
        """Queue ``namespace`` for a reconcile (called for every cache change)."""
        self._dirty.add(namespace)
        self._wake.set()

    def mark_all_dirty(self) -> None:
        for ns in self.cache.namespaces:
            self._dirty.add(ns)
        self._wake.set()

    def cancel_inflight(self) -> None:
        """Leadership lost: abandon the writes in progress at once."""
        if self._inflight is not None and not self._inflight.done():
            self._inflight.cancel()

    # -- the loop --------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile dirty namespaces as they come, and all of them every resync."""
        next_resync = time.monotonic() + self.controller.resync_seconds
        while True:
            timeout = max(0.0, next_resync - time.monotonic())
            try:
                async with asyncio.timeout(timeout):  # not wait_for: see leader.py
                    await self._wake.wait()
                await asyncio.sleep(DEBOUNCE_SECONDS)
            except TimeoutError:
                pass
            self._wake.clear()
            if time.monotonic() >= next_resync:
                self._dirty.update(self.cache.namespaces)
                next_resync = time.monotonic() + self.controller.resync_seconds
            batch, self._dirty = sorted(self._dirty), set()
            for ns in batch:
                await self.reconcile(ns)

    async def reconcile(self, namespace: str) -> Plan | None:
        """One namespace: observe, plan, publish, and (leader only) apply."""
        started = time.perf_counter()
        ok = True
        try:
            return await self._reconcile(namespace)
        except asyncio.CancelledError:
            raise
        except Exception:
            ok = False
            log(
                logger,
                logging.ERROR,
                "reconcile failed; the next event or resync retries",
                namespace=namespace,
                exc_info=True,
            )
            return None
        finally:
            self.metrics.record_reconcile(time.perf_counter() - started, ok)

    async def _reconcile(self, namespace: str) -> Plan | None:
        if not self.cache.synced(namespace):
            log(logger, logging.DEBUG, "cache not synced; not reconciling", namespace=namespace)
            return None
        if not await self._look_up_history(namespace):
            return None
        snap = self.cache.snapshot(namespace)
        pods: dict[str, PodSeen] = {}
        stamp = holder_pod_to_check(snap.lease, self.clock(), self.gate)
        if self.holders is not None:
            self.holders.want(namespace, (stamp[0], stamp[1]) if stamp else None)
        if stamp is not None and snap.lease is not None:
            seen = pods[snap.lease.holder_pod] = await self.observe_holder(*stamp)
            if seen.state == "unknown" and self.holders is not None:
                if self.holders.seen(stamp[0], stamp[1]).state != "unknown":
                    # The watch says gone but the GET that must confirm it failed: try
                    # again shortly, not at the resync (the reclaim bound is 15 s).
                    asyncio.get_running_loop().call_later(
                        RETRY_CONFIRM_SECONDS, self.mark_dirty, namespace
                    )
            # The world moved on while we waited: plan on the fresh cache. The pod lookup
            # only applies to the Lease version it was made for (keyed by its stamp).
            if not self.cache.synced(namespace):
                return None
            snap = self.cache.snapshot(namespace)
        now = self.clock()
        plan = make_plan(
            snap, pods, self._last_seen_active.get(namespace), now, self.gate, self.controller
        )
        self._publish(plan, now)
        self._look_again(namespace, plan.look_again_at, now)
        self._publish_lease(namespace, snap.lease)
        if plan.actions and self.may_act():
            await self._apply(plan)
        return plan

    async def _look_up_history(self, namespace: str) -> bool:
        """Look up the batch work of each live finalizer that nothing in view vouches for
        (:mod:`controller.history`); ``False``: not planned now (a lookup failed, or the
        cache relisted meanwhile), retried shortly."""
        wanted = self.cache.lookups_wanted(namespace)
        if not wanted:
            return True
        epoch = self.cache.jobs_epoch(namespace)
        try:
            found = await look_up_all(
                self.api, namespace, wanted, self.controller.controller_api_timeout_seconds
            )
        except (ApiError, ApiUnavailable) as exc:
            self.metrics.record_api_error("list", "jobs")
            log(
                logger,
                logging.WARNING,
                "batch-work lookup failed; not planning until it succeeds",
                namespace=namespace,
                detail=str(exc),
            )
            asyncio.get_running_loop().call_later(RETRY_CONFIRM_SECONDS, self.mark_dirty, namespace)
            return False
        if not self.cache.synced(namespace) or self.cache.jobs_epoch(namespace) != epoch:
            return False  # relisted meanwhile: the replace queued a reconcile
        for job_id, seen in found.items():
            self.cache.looked_up(namespace, job_id, seen)
        return True

    async def observe_holder(self, namespace: str, name: str, uid: str) -> PodSeen:
        """What is known of the stamped holder pod: its watch's view, and — before the plan
        may call it gone for being absent or replaced — a fresh GET, because the Lease
        watch may have delivered a new holder's stamp before the pod watch delivered its
        new pod."""
        if self.holders is None:
            return await self.observe_pod(namespace, name, uid)
        seen = self.holders.seen(namespace, name)
        if seen.state == "absent" or (seen.state == "present" and seen.uid != uid):
            fresh = await self.observe_pod(namespace, name, uid)
            if fresh.state == "present" and fresh.uid == uid:
                return PodSeen.of(fresh.pod, seen.node) if fresh.pod else fresh
            return fresh
        return seen

    async def observe_pod(self, namespace: str, name: str, uid: str) -> PodSeen:
        """GET the holder's pod: ``absent`` only on a 404; any error is ``unknown``."""
        try:
            pod: dict[str, Any] = await self.api.get(path(PODS, namespace, name))
        except ApiError as exc:
            if exc.not_found:
                return PodSeen("absent")
            self.metrics.record_api_error("get", "pods")
            return PodSeen("unknown", detail=str(exc))
        except ApiUnavailable as exc:
            self.metrics.record_api_error("get", "pods")
            return PodSeen("unknown", detail=str(exc))
        return PodSeen.of(PodView.from_dict(pod))

    def _look_again(self, namespace: str, when: datetime | None, now: datetime) -> None:
        """Reconcile ``namespace`` again just after ``when`` (one timer per namespace)."""
        current = self._timers.pop(namespace, None)
        if when is None:
            if current is not None:
                current[1].cancel()
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + max(0.0, (when - now).total_seconds()) + LOOK_AGAIN_SLACK_SECONDS
        if current is not None:
            if abs(current[0] - due) < LOOK_AGAIN_SLACK_SECONDS:
                self._timers[namespace] = current
                return
            current[1].cancel()
        handle = loop.call_at(due, self._timer_fired, namespace)
        self._timers[namespace] = (due, handle)

    def _timer_fired(self, namespace: str) -> None:
        self._timers.pop(namespace, None)
        self.mark_dirty(namespace)

    def _publish(self, plan: Plan, now: datetime) -> None:
        view = plan.liveness
        if view.in_use:
            self._last_seen_active[plan.namespace] = now
        self.views[plan.namespace] = view
        self.metrics.set_namespace_state(
            plan.namespace,
            active_searches=plan.census.count,
            split_searches=plan.split_searches,
            ceiling=self.gate.max_run_concurrency,
            orphans=len(plan.census.orphans),
            lease_expired=plan.lease_expired,
            in_use=view.in_use,
            idle_seconds=view.idle_seconds(),
            computed_at=now.timestamp(),
        )

    def _publish_lease(self, namespace: str, lease: LeaseView | None) -> None:
        """Who holds the submit Lease and until when, for the dashboard."""
        held = lease is not None and lease.held
        until = self.gate.expiry.at(lease) if lease is not None and held else None
        self.metrics.set_lease_holder(
            namespace,
            lease.holder if lease is not None and held else "",
            until.timestamp() if isinstance(until, datetime) else None,
        )

    async def _apply(self, plan: Plan) -> None:
        task = asyncio.create_task(self._apply_all(plan))
        self._inflight = task
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being shut down, not just losing leadership
            log(
                logger,
                logging.WARNING,
                "writes abandoned: leadership lost",
                namespace=plan.namespace,
            )
        finally:
            self._inflight = None

    async def _apply_all(self, plan: Plan) -> None:
        for action in plan.actions:
            outcome = await self.applier.apply(action)
            if outcome is Outcome.NOT_LEADER:
                return
            if outcome in (Outcome.CONFLICT, Outcome.FAILED):
                # Re-observe: the watch brings the new version; look again shortly even if
                # it does not (e.g. the write failed without anything changing).
                asyncio.get_running_loop().call_later(
                    REQUEUE_AFTER_CONFLICT, self.mark_dirty, plan.namespace
                )

    def liveness_json(self, leading: bool) -> dict[str, object]:
        """``GET /liveness``: every gated namespace; unsynced ones are *unknown*."""
        out: dict[str, object] = {}
        for ns in self.cache.namespaces:
            view = self.views.get(ns)
            if not self.cache.synced(ns) or view is None:
                out[ns] = {
                    "state": "unknown",
                    "inUse": None,
                    "why": "cache not synced (initial list pending or watch down)",
                }
            else:
                out[ns] = {"state": "in_use" if view.in_use else "idle", **view.as_json()}
        return {
            "leader": leading,
            "resyncSeconds": self.controller.resync_seconds,
            "namespaces": out,
        }
