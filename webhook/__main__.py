"""``python -m webhook``: elb-gate's admission webhook (settings from the environment)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from elbgate.identities import IdentityConfigError, SubmitterIdentities
from elbgate.kube.config import KubeConfig, KubeConfigError
from elbgate.serving import logs, runtime
from elbgate.serving.settings_help import server_parser
from elbgate.settings import Settings, SettingsError
from webhook.server import serve
from webhook.tls import CertificateInvalid


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """No flags but ``--help``: the webhook is configured by its environment."""
    parser = server_parser(
        "python -m webhook",
        "elb-gate admission webhook: HTTPS AdmissionReview on ELB_GATE_WEBHOOK_PORT_NUMBER "
        "(/validate/jobs, /validate/leases, /mutate/leases), plain-HTTP /metrics, "
        "/healthz and /readyz on ELB_GATE_METRICS_PORT_NUMBER. API access: KUBECONFIG, else "
        "the in-cluster service account.",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Refuse an incoherent configuration with a message naming it; else serve."""
    parse_args(argv)
    try:
        settings = Settings.from_env(os.environ)
    except SettingsError as exc:
        print(f"elb-gate webhook: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.server.log_format)
    try:
        identities = SubmitterIdentities.load(settings.webhook.submitter_identities_file)
        kube = KubeConfig.load()
    except (IdentityConfigError, KubeConfigError) as exc:
        print(f"elb-gate webhook: {exc}", file=sys.stderr)
        return 2
    runtime.tune_gc()
    try:
        asyncio.run(serve(settings, identities, kube))
    except CertificateInvalid as exc:  # only the client CA is checked before serving
        print(f"elb-gate webhook: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
