"""``python -m controller``: settings from the environment, API access from KUBECONFIG or
the in-cluster service account; SIGTERM/SIGINT shut down cleanly (leadership released)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from controller.registration import unregister
from controller.server import serve
from elbgate import logs
from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig, KubeConfigError
from elbgate.serving import logs as log_setup
from elbgate.serving import runtime
from elbgate.serving.settings_help import server_parser
from elbgate.settings import Settings, SettingsError

logger = logging.getLogger("controller.server")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = server_parser(
        "python -m controller",
        "elb-gate controller (leader-elected): stale-Lease GC, dead-holder reclaim, "
        "orphaned-finalizer GC, the liveness ConfigMaps; plain-HTTP /metrics, /healthz, "
        "/readyz and /liveness on ELB_GATE_METRICS_PORT_NUMBER. Settings come from the "
        "environment (below).",
    )
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG or in-cluster")
    parser.add_argument(
        "command",
        nargs="?",
        choices=("serve", "unregister"),
        default="serve",
        help="serve (the default): run the controller; unregister: delete the "
        "configurations' ConfigMap and elb-gate's two webhook configurations, then exit "
        "(before `helm uninstall`, to have them gone before anything else)",
    )
    return parser.parse_args(argv)


async def _unregister(settings: Settings, config: KubeConfig) -> int:
    async with KubeApi(config, timeout=10.0, user_agent="elb-gate-unregister") as api:
        deleted = await unregister(api, settings.server.pod_namespace, settings.controller)
    logs.log(logger, logging.INFO, "unregistered", deleted=deleted)
    return 0


async def _main(settings: Settings, config: KubeConfig) -> None:
    task = asyncio.create_task(serve(settings, config))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = Settings.from_env(os.environ)
    except SettingsError as exc:
        print(f"elb-gate controller: {exc}", file=sys.stderr)
        return 2
    log_setup.configure(settings.server.log_format)
    try:
        config = KubeConfig.load(args.kubeconfig)
    except KubeConfigError as exc:
        logs.log(logger, logging.ERROR, "no API configuration", detail=str(exc))
        return 2
    if args.command == "unregister":
        if not settings.controller.registration_configmap:
            logs.log(logger, logging.INFO, "unregister: registration is off; nothing to do")
            return 0
        return asyncio.run(_unregister(settings, config))
    runtime.tune_gc()
    asyncio.run(_main(settings, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
