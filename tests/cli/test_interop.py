"""`elb-gate` shares one Lease, with one meaning of busy, with the existing submit
paths, on the real API server with the webhook: the dashboard's client (raw
HTTP: GET / POST / PUT with resourceVersion, 409 = busy) and the OpenAPI
service's (``kubectl get --ignore-not-found / create -f - / replace -f -``,
running in its Pod; busy on "AlreadyExists" or a conflict). Both are the
faithful reproductions of :mod:`testbed.clients`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from client.cli import exit_codes
from testbed.clients import DashboardLeaseClient, OpenApiLeaseClient
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from tests.cli.conftest import Cli
from tests.client.conftest import holder_of, lease_of

pytestmark = pytest.mark.kubectl

FAST = ("--poll-interval", "0.1")


def dashboard(cp: ControlPlane, ns: str) -> DashboardLeaseClient:
    """The dashboard's Celery task: raw HTTP with the dashboard's token."""
    return DashboardLeaseClient.on(cp, "dashboard-lease", ns)


def openapi(cp: ControlPlane, ns: str) -> OpenApiLeaseClient:
    """The OpenAPI service: kubectl in its Pod, with the Pod's bound token."""
    return OpenApiLeaseClient.on(cp, cp.pod_identity(ns, "elb-openapi"), ns)


@contextmanager
def having_read(client: OpenApiLeaseClient, earlier: dict[str, Any] | None) -> Iterator[None]:
    """The client's next writes act on what it read ``earlier`` (a read that raced
    another submitter's write), as when its GET came just before that write."""
    client.get = lambda: None if earlier is None else dict(earlier)  # type: ignore[method-assign]
    try:
        yield
    finally:
        del client.get


def test_a_lease_held_by_the_dashboard_client_makes_elb_gate_busy_not_failed(
    cli: Cli, control_plane: ControlPlane
) -> None:
    raw = dashboard(control_plane, cli.ns)
    assert raw.acquire() == "acquired"
    run = cli.run("submit", *FAST, "--", *cli.recorder("x"), BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS="0")
    assert run.code == exit_codes.SUBMIT_SLOT_TIMEOUT, run.stderr
    assert f"held by {raw.holder} (user dashboard-lease) until " in run.stderr
    assert raw.release() == "released"
    run = cli.run("submit", *FAST, "--", *cli.recorder("y"))
    assert run.code == 0, run.stderr
    assert raw.acquire() == "acquired", "the dashboard takes the Lease elb-gate released"
    assert holder_of(control_plane, cli.ns) == raw.holder


def test_a_lease_held_by_the_openapi_client_makes_elb_gate_busy_not_failed(
    cli: Cli, control_plane: ControlPlane
) -> None:
    kc = openapi(control_plane, cli.ns)
    assert kc.acquire() == "acquired"
    run = cli.run("submit", *FAST, "--", *cli.recorder("x"), BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS="0")
    assert run.code == exit_codes.SUBMIT_SLOT_TIMEOUT, run.stderr
    assert kc.holder in run.stderr and f"(user system:serviceaccount:{cli.ns}:elb-openapi" in (
        run.stderr
    )
    assert kc.release() == "released"
    assert holder_of(control_plane, cli.ns) == ""


def test_while_elb_gate_runs_both_existing_clients_see_busy_and_win_after_it(
    cli: Cli, control_plane: ControlPlane
) -> None:
    raw, kc = dashboard(control_plane, cli.ns), openapi(control_plane, cli.ns)
    assert raw.acquire() == "acquired"
    assert raw.release() == "released"
    before_cli = kc.get()  # the OpenAPI client read the free Lease before elb-gate took it
    assert before_cli is not None
    run = cli.start("submit", *FAST, "--", *cli.recorder("x", go="go"))
    wait_until(lambda: len(cli.log_lines()) == 1, 60, "COMMAND to start")
    cli_holder = holder_of(control_plane, cli.ns)
    assert cli_holder.startswith("cli-")
    assert raw.acquire() == "busy", "dashboard: elb-gate's Lease is live, so busy"
    assert kc.acquire() == "busy", "OpenAPI: elb-gate's Lease is live, so busy"
    # Writes based on reads that predate elb-gate's are refused, and read as busy:
    with having_read(kc, before_cli):
        assert kc.acquire() == "busy", "a replace on the stale read: a conflict"
    assert "Conflict" in kc.last_stderr
    with having_read(kc, None):
        assert kc.acquire() == "busy", "a create of the existing Lease: AlreadyExists"
    assert "AlreadyExists" in kc.last_stderr
    assert holder_of(control_plane, cli.ns) == cli_holder
    cli.release_go("go")
    assert run.wait() == 0, run.stderr
    assert holder_of(control_plane, cli.ns) == ""
    assert kc.acquire() == "acquired" and holder_of(control_plane, cli.ns) == kc.holder
    assert kc.release() == "released"
    assert raw.acquire() == "acquired" and holder_of(control_plane, cli.ns) == raw.holder
    stored = lease_of(control_plane, cli.ns)
    assert stored is not None
    assert stored["metadata"]["annotations"]["elb-gate.io/holder-user"] == "dashboard-lease"
