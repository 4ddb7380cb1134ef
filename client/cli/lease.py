"""``elb-gate lease status`` and ``elb-gate lease release --force``.

``release --force`` is the controller-style reclaim of an *expired* Lease, for
when the controller is not running: a live Lease is refused, naming its holder
and expiry. The write is a CAS on resourceVersion (one re-read on conflict), so
it cannot clear a holder that renewed or took over in the meantime.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from client.errors import CoordinationError
from client.lease_ops import released_body
from client.observe import read_lease
from client.sync_kube import SyncKube
from elbgate.kube.api import LEASES, ApiError, ApiUnavailable, path
from elbgate.names import lease_name

from . import exit_codes
from .connection import (
    CliError,
    add_command,
    add_output_flag,
    connect,
    environment,
    load_settings,
    render,
    require_namespace,
)
from .lease_report import describe_lease, force_release_verdict, lease_summary

HELP = "show or reclaim the namespace's submit Lease"
DESCRIPTION = """\
Show who holds the namespace's submit Lease (lease status), or clear an expired
one when the controller is not running to reclaim it (lease release --force)."""
STATUS_DESCRIPTION = """\
Who holds the namespace's submit Lease, since when and until when (its renew
time plus the Lease TTL and the clock-skew allowance), or that it is free."""
RELEASE_DESCRIPTION = """\
Clear the holder of an EXPIRED submit Lease, as the controller does when it
reclaims one: for when the controller is not running. A live Lease is refused
(exit 1), naming its holder and expiry. The write is conditional on the Lease's
resourceVersion (one re-read on a conflict), so it cannot clear a holder that
renewed or took over in the meantime."""


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "lease",
        parents,
        help=HELP,
        description=DESCRIPTION,
        exits=[exit_codes.LEASE_STATUS, exit_codes.LEASE_RELEASE],
    )
    actions = parser.add_subparsers(dest="lease_action", metavar="{status,release}")
    actions.required = True
    status = add_command(
        actions,
        "status",
        parents,
        help="who holds the Lease, until when",
        description=STATUS_DESCRIPTION,
        exits=[exit_codes.LEASE_STATUS],
    )
    add_output_flag(status)
    status.set_defaults(run=run_status)
    release = add_command(
        actions,
        "release",
        parents,
        help="clear an EXPIRED Lease (needs --force; a live one is refused)",
        description=RELEASE_DESCRIPTION,
        exits=[exit_codes.LEASE_RELEASE],
    )
    release.add_argument("--force", action="store_true", help="confirm clearing an expired holder")
    release.set_defaults(run=run_release)


def run_status(args: argparse.Namespace, command: list[str]) -> int:
    settings = load_settings(environment())
    conn = connect(args, settings)
    with conn.kube() as kube:
        require_namespace(kube, conn.namespace)
        lease = read_lease(kube, conn.namespace)
    summary = lease_summary(lease, lease_name(conn.namespace), settings.gate, datetime.now(UTC))
    print(render(summary, args.output, describe_lease))
    return exit_codes.OK


def run_release(args: argparse.Namespace, command: list[str]) -> int:
    if not args.force:
        raise CliError(
            exit_codes.USAGE,
            "lease release clears another submitter's hold; it needs --force and only "
            "works on an expired Lease (see `elb-gate lease status`)",
        )
    settings = load_settings(environment())
    conn = connect(args, settings)
    with conn.kube() as kube:
        require_namespace(kube, conn.namespace)
        for attempt in (1, 2):  # one re-read on a conflict, as every Lease write here
            lease = read_lease(kube, conn.namespace)
            verdict = force_release_verdict(lease, settings.gate, datetime.now(UTC))
            if not verdict.allowed:
                print(verdict.message, file=sys.stderr)
                return exit_codes.REFUSED if verdict.live else exit_codes.OK
            assert lease is not None
            print(verdict.message, file=sys.stderr)
            try:
                _put(kube, conn.namespace, released_body(lease))
            except ApiError as exc:
                if exc.conflict and attempt == 1:
                    continue
                raise CoordinationError(
                    "release lease", conn.namespace, exc, kube.config.host
                ) from exc
            except ApiUnavailable as exc:
                raise CoordinationError(
                    "release lease", conn.namespace, exc, kube.config.host
                ) from exc
            print(f"Lease {lease_name(conn.namespace)} released", file=sys.stderr)
            return exit_codes.OK
    raise CliError(exit_codes.COORDINATION_ERROR, "the Lease kept changing; try again")


def _put(kube: SyncKube, namespace: str, body: dict[str, Any]) -> None:
    url = path(LEASES, namespace, lease_name(namespace))
    kube.run(lambda api: api.replace(url, body))
