"""Global flags (``--kubeconfig``, ``--context``, ``-n/--namespace``), settings and
API configuration for every ``elb-gate`` command, with errors that say what to fix."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from client.errors import CoordinationError
from client.sync_kube import SyncKube
from elbgate.kube.api import ApiError, ApiUnavailable, resource_path
from elbgate.kube.config import KubeConfig, KubeConfigError
from elbgate.settings import Settings, SettingsError

from . import exit_codes


class CliError(Exception):
    """An error the CLI reports in one line and exits with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


KUBECONFIG_ORDER = "$KUBECONFIG, else in-cluster configuration in a pod, else ~/.kube/config"
"""Where the API configuration comes from without ``--kubeconfig``, in the order
:meth:`elbgate.kube.config.KubeConfig.load` tries (docs/cli.md says the same)."""


def add_global_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Add the global flags. Subcommand parsers use ``suppress=True`` so a flag given
    after the command wins and one given before it is not reset to a default."""
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        default=default,
        help=f"kubeconfig file (default: {KUBECONFIG_ORDER})",
    )
    parser.add_argument(
        "--context", metavar="NAME", default=default, help="kubeconfig context to use"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        default=default,
        help="namespace (default: the kubeconfig context's, else 'default')",
    )


@dataclass
class Connection:
    """What a command needs to talk to the cluster."""

    settings: Settings
    config: KubeConfig
    namespace: str

    def kube(self) -> SyncKube:
        return SyncKube(self.config)


def load_settings(env: Mapping[str, str], **overrides: Any) -> Settings:
    """Settings from the environment; an incoherent set is a CONFIG_ERROR naming the variables."""
    try:
        return Settings.from_env(env, **overrides)
    except SettingsError as exc:
        raise CliError(exit_codes.CONFIG_ERROR, str(exc)) from None


def connect(args: argparse.Namespace, settings: Settings) -> Connection:
    """Load the API configuration named by the global flags."""
    try:
        config = KubeConfig.load(args.kubeconfig, args.context)
    except KubeConfigError as exc:
        raise CliError(exit_codes.CONFIG_ERROR, str(exc)) from None
    namespace = args.namespace or config.namespace or "default"
    return Connection(settings, config, namespace)


OUTPUT_FORMATS = ("table", "json", "yaml")
"""``-o`` of the reporting commands, as ``kubectl -o``: a person's table, or the
same facts as one JSON or YAML document for a script."""


def add_command(
    subparsers: Any,
    name: str,
    parents: list[argparse.ArgumentParser],
    *,
    help: str,
    description: str,
    exits: Sequence[str],
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """One ``elb-gate`` command, with the global flags of ``parents``, the exit codes
    the commands ``exits`` can end with as its epilog, and its description printed as
    written."""
    return subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=exit_codes.help_text(*exits),
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    """``-o/--output table|json|yaml``."""
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default="table",
        help="table: for a person (default); json or yaml: the same facts as one "
        "JSON or YAML document, for a script",
    )


def render(report: dict[str, Any], output: str, table: Callable[[dict[str, Any]], str]) -> str:
    """``report`` in the format ``-o`` asked for (``table`` uses ``table``)."""
    if output == "json":
        return json.dumps(report, indent=2)
    if output == "yaml":
        return yaml.safe_dump(report, sort_keys=False, default_flow_style=False).rstrip("\n")
    return table(report)


def require_namespace(kube: SyncKube, namespace: str) -> None:
    """Fail with NO_SUCH_NAMESPACE when ``namespace`` does not exist. Reading a
    missing namespace otherwise looks exactly like an idle one (an empty LIST, an
    absent Lease), and an operator who mistyped ``-n`` would read a verdict about
    nothing. An identity that may not read namespaces (403) is not stopped: the
    check is a courtesy, the commands themselves need no such grant."""
    url = resource_path("v1", "namespaces", name=namespace)
    try:
        kube.run(lambda api: api.get(url))
    except ApiError as exc:
        if exc.not_found and not exc.from_kubernetes:
            raise CliError(
                exit_codes.COORDINATION_ERROR,
                f"{kube.config.host} answered 404 without a Kubernetes Status "
                f"(HTTP {exc.code}: {exc.message.split(': ', 2)[-1]!r}): it is not a "
                "Kubernetes API server; check the server of the kubeconfig context",
            ) from None
        if exc.not_found:
            raise CliError(
                exit_codes.NO_SUCH_NAMESPACE,
                f'namespace "{namespace}" not found on {kube.config.host}; '
                "check -n/--namespace and the kubeconfig context",
            ) from None
        if exc.code == 403:
            return
        raise CoordinationError("get namespace", namespace, exc, kube.config.host) from exc
    except ApiUnavailable as exc:
        raise CoordinationError("get namespace", namespace, exc, kube.config.host) from exc


def environment() -> Mapping[str, str]:
    """The process environment (the one place the CLI reads it)."""
    return os.environ
