"""Wiring: build the cache, informers, leader elector, reconciler and HTTP server from
the settings, run them until cancelled, and shut down cleanly (releasing leadership)."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from aiohttp import web

from controller.apply import Applier
from controller.cache import Cache, Kind
from controller.certificates import CertificateManager
from controller.certificates import run as run_certificates
from controller.holder_watch import HolderWatches
from controller.http import Health, create_app
from controller.leader import LeaderElector
from controller.metrics import COMPONENT, ControllerMetrics
from controller.reconciler import Reconciler
from controller.registration import Registrar
from elbgate.kube.api import CONFIGMAPS, JOBS, LEASES, KubeApi, path
from elbgate.kube.config import KubeConfig
from elbgate.kube.informer import Informer, WatchSpec
from elbgate.logs import log
from elbgate.names import (
    ADMISSION_RECORD_CONFIGMAP,
    BATCH_WORK_EVIDENCE_APPS,
    LIVENESS_CONFIGMAP,
    SEARCH_APPS,
    lease_name,
)
from elbgate.serving.credential_metrics import register_credential_failures
from elbgate.settings import ControllerSettings, ServerSettings, Settings

logger = logging.getLogger("controller.server")


def identity(server: ServerSettings) -> str:
    """This process's leader identity: pod name (or hostname) + a fresh uuid, so even two
    processes given the same pod name never both believe they hold the Lease."""
    return f"{server.pod_name or socket.gethostname()}_{uuid.uuid4().hex}"


def job_selector(controller: ControllerSettings) -> str:
    """``app in (...)``: the census's apps and the batch-work evidence apps (a finalizer's
    record), watched live only (:data:`LIVE_JOBS`)."""
    del controller  # the same apps whatever is configured; kept for its callers
    apps = sorted(set(SEARCH_APPS) | BATCH_WORK_EVIDENCE_APPS)
    return f"app in ({','.join(apps)})"


def liveness_only_apps(controller: ControllerSettings) -> tuple[str, ...]:
    """The configured liveness apps no search watch sees (``elb-db-warmup``, …)."""
    return tuple(
        sorted(set(controller.liveness_apps) - set(SEARCH_APPS) - BATCH_WORK_EVIDENCE_APPS)
    )


LIVE_JOBS = "status.successful=0"
"""The Jobs the controller watches: unfinished (and failed) ones, as the webhook's census
LIST reads them. A namespace's history of succeeded Jobs — tens of thousands, most of the
bytes — is never listed; what a decision still needs of it is looked up
(:mod:`controller.history`)."""


def watch_specs(controller: ControllerSettings) -> list[WatchSpec]:
    """The watches of each gated namespace: live search Jobs, the liveness-only apps'
    Jobs (whole: few, and an Indexed one part done still runs), the submit Lease, the
    liveness ConfigMap and the admission record."""
    out: list[WatchSpec] = []
    others = liveness_only_apps(controller)
    for ns in controller.namespaces:
        if others:
            out.append(
                WatchSpec(
                    Kind.LIVENESS_JOBS,
                    ns,
                    path(JOBS, ns),
                    label_selector=f"app in ({','.join(others)})",
                )
            )
        out.append(
            WatchSpec(
                Kind.JOBS,
                ns,
                path(JOBS, ns),
                label_selector=job_selector(controller),
                field_selector=LIVE_JOBS,
            )
        )
        out.append(
            WatchSpec(
                Kind.LEASES, ns, path(LEASES, ns), field_selector=f"metadata.name={lease_name(ns)}"
            )
        )
        out.append(
            WatchSpec(
                Kind.CONFIGMAPS,
                ns,
                path(CONFIGMAPS, ns),
                field_selector=f"metadata.name={LIVENESS_CONFIGMAP}",
            )
        )
        out.append(
            WatchSpec(
                Kind.ADMISSIONS,
                ns,
                path(CONFIGMAPS, ns),
                field_selector=f"metadata.name={ADMISSION_RECORD_CONFIGMAP}",
            )
        )
    return out


class Controller:
    """Everything one controller process runs."""

    def __init__(
        self,
        settings: Settings,
        api: KubeApi,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        watch_timeout_seconds: int = 300,
    ) -> None:
        self.settings = settings
        self.api = api
        self.identity = identity(settings.server)
        self.metrics = ControllerMetrics()
        register_credential_failures(self.metrics.registry, COMPONENT, api.config.token)
        self.cache = Cache(
            settings.controller.namespaces,
            on_change=self._changed,
            liveness_jobs_watched=bool(liveness_only_apps(settings.controller)),
        )
        self.leader = LeaderElector(
            api,
            settings.server.pod_namespace,
            settings.controller.leader_lease_name,
            self.identity,
            self.metrics,
            lease_seconds=settings.controller.leader_lease_seconds,
            renew_seconds=settings.controller.leader_renew_seconds,
            on_started=self._leading,
            on_stopped=self._not_leading,
        )
        self.applier = Applier(
            api, self.cache, self.metrics, self.identity, self.leader.may_act, clock
        )
        self.holders = HolderWatches(
            api, self.metrics, self._changed, watch_timeout_seconds=watch_timeout_seconds
        )
        self.reconciler = Reconciler(
            settings.gate,
            settings.controller,
            self.cache,
            api,
            self.applier,
            self.metrics,
            self.leader.may_act,
            clock,
            holders=self.holders,
        )
        self.certificates: CertificateManager | None = None
        if settings.controller.certificates == "managed":
            self.certificates = CertificateManager(
                api,
                settings.server.pod_namespace,
                settings.controller,
                settings.webhook.tls_secret,
                may_act=self.leader.may_act,
                owner=(
                    settings.controller.registration_owner
                    if settings.controller.registration_configmap
                    else ""
                ),
            )
        self.registrar: Registrar | None = None
        if settings.controller.registration_configmap:
            self.registrar = Registrar(
                api,
                settings.server.pod_namespace,
                settings.controller,
                ca_bundle=self.certificates.ca_bundle if self.certificates else None,
            )
        self.informers = [
            Informer(
                api, self.cache, spec, self.metrics, watch_timeout_seconds=watch_timeout_seconds
            )
            for spec in watch_specs(settings.controller)
        ]
        self.health = Health(
            ready=self.cache.all_synced,
            liveness=lambda: self.reconciler.liveness_json(self.leader.may_act()),
            metrics=self.metrics.render,
        )
        self.metrics_port = 0

    def _changed(self, namespace: str) -> None:
        self.reconciler.mark_dirty(namespace)

    def _leading(self) -> None:
        self.reconciler.mark_all_dirty()

    def _not_leading(self) -> None:
        self.reconciler.cancel_inflight()

    async def run(self) -> None:
        """Serve, watch, elect and reconcile until cancelled."""
        runner = web.AppRunner(create_app(self.health), access_log=None)
        await runner.setup()
        site = web.TCPSite(
            runner, self.settings.server.bind_address, self.settings.server.metrics_port
        )
        await site.start()
        self.metrics_port = runner.addresses[0][1]
        log(
            logger,
            logging.INFO,
            "metrics server listening",
            port=self.metrics_port,
            address=self.settings.server.bind_address,
        )
        log(
            logger,
            logging.INFO,
            "controller starting",
            identity=self.identity,
            namespaces=list(self.settings.controller.namespaces),
            resync_seconds=self.settings.controller.resync_seconds,
            orphan_policy=self.settings.controller.orphan_policy,
        )
        self.metrics.set_leader(False)
        try:
            async with asyncio.TaskGroup() as tg:
                for informer in self.informers:
                    tg.create_task(informer.run())
                tg.create_task(self.reconciler.run())
                tg.create_task(self.leader.run())
                if self.certificates is not None or self.registrar is not None:
                    tg.create_task(
                        run_certificates(
                            self.certificates,
                            self.settings.controller.cert_check_seconds,
                            self.leader.may_act,
                            self.registrar,
                        )
                    )
        finally:
            self.reconciler.cancel_inflight()
            await asyncio.shield(self.holders.close())
            await asyncio.shield(self.leader.release())
            await runner.cleanup()
            log(logger, logging.INFO, "controller stopped", identity=self.identity)


async def serve(settings: Settings, config: KubeConfig) -> None:
    """Run a controller against ``config`` until cancelled (SIGTERM/SIGINT)."""
    async with KubeApi(
        config,
        timeout=settings.controller.controller_api_timeout_seconds,
        user_agent="elb-gate-controller",
    ) as api:
        await Controller(settings, api).run()
