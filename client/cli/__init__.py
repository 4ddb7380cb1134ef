"""``elb-gate``: the submit-path client and operator views on the command line.

Commands (one module each): ``submit`` (:mod:`.submit`), ``census``
(:mod:`.census`), ``lease status|release`` (:mod:`.lease`). Exit codes live in
:mod:`.exit_codes`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from client.errors import CoordinationError

from . import census, exit_codes, lease, submit
from .connection import CliError, add_global_flags


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; global flags are accepted before or after the command."""
    common = argparse.ArgumentParser(add_help=False)
    add_global_flags(common, suppress=True)
    parser = argparse.ArgumentParser(
        prog="elb-gate",
        description="Coordinate ElasticBLAST submits through the cluster's submit Lease.",
        epilog=exit_codes.help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_global_flags(parser, suppress=False)
    parser.add_argument("--version", action="version", version=f"elb-gate {_version()}")
    commands = parser.add_subparsers(dest="command_name", metavar="{submit,census,lease}")
    commands.required = True
    submit.add_parser(commands, [common])
    census.add_parser(commands, [common])
    lease.add_parser(commands, [common])
    return parser


def _version() -> str:
    try:
        return version("elb-gate")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``elb-gate`` console script; returns the exit code."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is COMMAND, untouched by option parsing.
    command: list[str] = []
    if "--" in args_in:
        cut = args_in.index("--")
        args_in, command = args_in[:cut], args_in[cut + 1 :]
    parser = build_parser()
    args = parser.parse_args(args_in)
    if command and args.command_name != "submit":
        parser.error(f"{args.command_name} takes no COMMAND after --")
    logging.basicConfig(level=logging.ERROR, format="elb-gate: %(levelname)s: %(message)s")
    try:
        code: int = args.run(args, command)
        return code
    except CliError as exc:
        print(f"elb-gate: error: {exc.message}", file=sys.stderr)
        return exc.code
    except CoordinationError as exc:
        print(f"elb-gate: error: {exc}", file=sys.stderr)
        return exit_codes.COORDINATION_ERROR


__all__ = ["build_parser", "main"]
