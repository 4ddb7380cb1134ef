"""``elb-gate submit [--source S] [--exec-timeout N] -- COMMAND…``: wait for a
submit slot (Lease + capacity), run COMMAND under the exec timeout with the
Lease renewed by a heartbeat, release on exit, on SIGINT and on SIGTERM."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from client.errors import (
    CapacityTimeout,
    CoordinationError,
    SlotCancelled,
    SubmitSlotTimeout,
)
from client.slot import run_slot
from client.slot_machine import DEFAULT_POLL_SECONDS
from client.submit_lease import SubmitLease
from elbgate.durations import format_duration
from elbgate.lease import new_holder_identity

from . import exit_codes
from .child_process import DEFAULT_KILL_GRACE_SECONDS, ChildOutcome, run_child
from .connection import CliError, add_command, connect, environment, load_settings
from .status_line import StatusLine

HELP = "wait for a submit slot, then run COMMAND holding it"
DESCRIPTION = """\
Acquire the namespace's submit Lease (elb-blast-submit-<namespace>), waiting as
waiting_for_submit_slot while another submitter holds it; check the census under
the Lease, waiting as waiting_for_capacity (Lease released) while the namespace
is at BLAST_MAX_RUN_CONCURRENCY. While waiting it watches the Lease and the search
Jobs and queues behind earlier elb-gate submit waiters (a Lease
elb-blast-wait-<holder> of its own): the first in line tries the moment a slot
frees; then run COMMAND under the exec timeout while a
heartbeat renews the Lease, and release it when COMMAND ends, on SIGINT and on
SIGTERM (COMMAND is terminated first). Deadlines and limits come from the
BLAST_*/ELB_GATE_* environment (see docs/cli.md).

example:
  elb-gate submit -n blast --source dashboard -- elastic-blast submit --cfg search.ini
"""


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "submit",
        parents,
        help=HELP,
        description=DESCRIPTION,
        exits=[exit_codes.SUBMIT],
        usage="%(prog)s [options] -- COMMAND [ARG...]",
    )
    parser.add_argument(
        "--source",
        default="cli",
        help="holder prefix: the Lease holder is <source>-<uuid4 hex> (default: cli)",
    )
    parser.add_argument(
        "--exec-timeout",
        type=int,
        metavar="SECONDS",
        help="COMMAND's time limit (default: ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS, "
        "else TTL - 2 x skew); must stay below BLAST_SUBMIT_LEASE_TTL_SECONDS",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=DEFAULT_POLL_SECONDS,
        metavar="SECONDS",
        help="retry interval while busy or full when the Lease and Jobs cannot be watched; "
        f"while they are watched a slot freeing wakes the next waiter in line at once "
        f"(default: {DEFAULT_POLL_SECONDS:g})",
    )
    parser.add_argument(
        "--kill-grace",
        type=float,
        default=DEFAULT_KILL_GRACE_SECONDS,
        metavar="SECONDS",
        help="time COMMAND gets after SIGTERM before SIGKILL "
        f"(default: {DEFAULT_KILL_GRACE_SECONDS:g})",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, command: list[str]) -> int:
    """Run ``elb-gate submit``; returns the exit code."""
    if not command:
        raise CliError(
            exit_codes.USAGE,
            "submit: give the command after --, e.g. "
            "elb-gate submit -- elastic-blast submit --cfg search.ini",
        )
    try:
        new_holder_identity(args.source)
    except ValueError as exc:
        raise CliError(exit_codes.USAGE, f"--source: {exc}") from None
    if args.poll_interval <= 0 or args.kill_grace < 0:
        raise CliError(exit_codes.USAGE, "--poll-interval must be > 0 and --kill-grace >= 0")
    overrides = {}
    if args.exec_timeout is not None:
        overrides["submit_exec_timeout_seconds"] = args.exec_timeout
    settings = load_settings(environment(), **overrides)
    conn = connect(args, settings)
    exec_timeout = settings.client.effective_exec_timeout_seconds(settings.gate)

    status = StatusLine(sys.stderr)
    stop = threading.Event()
    received: list[int] = []

    def on_heartbeat(kind: str, exc: Exception) -> None:
        if kind == "lost":
            status.note(f"elb-gate: warning: the submit Lease was lost while COMMAND ran: {exc}")
        else:
            status.note(f"elb-gate: warning: Lease renewal failed (will retry): {exc}")

    kube = conn.kube()
    lease = SubmitLease(conn.namespace, gate=settings.gate, source=args.source, kube=kube)
    try:
        with _stop_on_signals(stop, received):
            try:
                with run_slot(
                    lease,
                    settings.client,
                    on_state=status.update,
                    cancel=stop,
                    poll_seconds=args.poll_interval,
                    on_heartbeat=on_heartbeat,
                ) as slot:
                    status.note(
                        f"elb-gate: running {shlex.join(command)} as {slot.holder} "
                        f"(exec timeout {format_duration(exec_timeout)})"
                    )
                    outcome = _run_command(command, exec_timeout, stop, received, args.kill_grace)
            except SubmitSlotTimeout as exc:
                status.note(f"elb-gate: submit_slot_timeout: {exc}")
                return exit_codes.SUBMIT_SLOT_TIMEOUT
            except CapacityTimeout as exc:
                status.note(f"elb-gate: capacity_timeout: {exc}")
                return exit_codes.CAPACITY_TIMEOUT
            except SlotCancelled:
                signum = received[0] if received else signal.SIGINT
                status.note(f"elb-gate: stopped by {signal.Signals(signum).name} while waiting")
                return exit_codes.for_signal(signum)
            except CoordinationError as exc:
                status.note(f"elb-gate: coordination_error: {exc}")
                return exit_codes.COORDINATION_ERROR
    finally:
        status.close()
        lease.close()
        kube.close()
    if outcome.timed_out:
        status.note(
            f"elb-gate: exec timeout: COMMAND ran past {format_duration(exec_timeout)} "
            "and was stopped"
        )
    elif outcome.stopped_by is not None:
        name = signal.Signals(outcome.stopped_by).name
        status.note(f"elb-gate: stopped by {name}: COMMAND terminated, Lease released")
    return outcome.exit_code


def _run_command(
    command: list[str], timeout: int, stop: threading.Event, received: list[int], grace: float
) -> ChildOutcome:
    try:
        return run_child(
            command,
            timeout=timeout,
            stop=stop,
            stop_signal=lambda: received[0] if received else signal.SIGTERM,
            kill_grace=grace,
        )
    except FileNotFoundError:
        raise CliError(exit_codes.COMMAND_NOT_FOUND, f"command not found: {command[0]}") from None
    except PermissionError:
        raise CliError(exit_codes.CANNOT_EXECUTE, f"cannot execute: {command[0]}") from None


@contextmanager
def _stop_on_signals(stop: threading.Event, received: list[int]) -> Iterator[None]:
    """SIGINT/SIGTERM set ``stop`` (remembering which came first) instead of
    killing the process, so the child is stopped and the Lease released in order."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        if not received:
            received.append(signum)
        stop.set()

    previous: dict[int, Callable[..., Any] | int | None] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for num, old in previous.items():
            signal.signal(num, old)
