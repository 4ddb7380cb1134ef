"""The settings table as ``python -m webhook --help`` and ``python -m controller
--help`` print it: both servers are configured by environment only, so their
help is the list of variables, defaults and meanings (from :func:`describe`)."""

from __future__ import annotations

import argparse
import textwrap

from elbgate.settings import describe


def settings_epilog(width: int = 100) -> str:
    """``environment (default) — meaning`` for every setting, wrapped to ``width``."""
    lines = ["settings (environment variables; a ConfigMap in the cluster):"]
    for name, default, doc in describe():
        shown = default or "empty"
        lines.append(f"  {name} (default: {shown})")
        lines += textwrap.wrap(doc, width, initial_indent="      ", subsequent_indent="      ")
    lines.append("An incoherent set is refused at start-up, naming the variables.")
    return "\n".join(lines)


def server_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argument parser whose ``--help`` explains a server and lists its settings."""
    return argparse.ArgumentParser(
        prog=prog,
        description=textwrap.fill(description, 100),
        epilog=settings_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
