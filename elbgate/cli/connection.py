"""Global flags (``--kubeconfig``, ``--context``, ``-n/--namespace``), settings and
API configuration for every ``elb-gate`` command, with errors that say what to fix."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elbgate.client.sync_kube import SyncKube
from elbgate.kube.config import KubeConfig, KubeConfigError
from elbgate.settings import Settings, SettingsError

from . import exit_codes


class CliError(Exception):
    """An error the CLI reports in one line and exits with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


def add_global_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Add the global flags. Subcommand parsers use ``suppress=True`` so a flag given
    after the command wins and one given before it is not reset to a default."""
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        default=default,
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)",
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


def environment() -> Mapping[str, str]:
    """The process environment (the one place the CLI reads it)."""
    return os.environ
