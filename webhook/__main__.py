"""``python -m webhook``: elb-gate's admission webhook (settings from the environment)."""

from __future__ import annotations

import asyncio
import os
import sys

from elbgate import logs
from elbgate.identities import IdentityConfigError, SubmitterIdentities
from elbgate.kube.config import KubeConfig, KubeConfigError
from elbgate.settings import Settings, SettingsError
from webhook.server import serve


def main() -> int:
    """Refuse an incoherent configuration with a message naming it; else serve."""
    try:
        settings = Settings.from_env(os.environ)
    except SettingsError as exc:
        print(f"elb-gate webhook: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_format)
    try:
        identities = SubmitterIdentities.load(settings.submitter_identities_file)
        kube = KubeConfig.load()
    except (IdentityConfigError, KubeConfigError) as exc:
        print(f"elb-gate webhook: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(settings, identities, kube))
    return 0


if __name__ == "__main__":
    sys.exit(main())
