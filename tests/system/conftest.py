"""Fixtures of the system tier: one control plane with real kubelet nodes per
test module, the product's image imported on every node, and the chart installed as
shipped (``helm install``), the API server calling the webhook through the Service.

A tier per module, not per session: each module starts from a control plane, nodes
and host with nothing of another module's (no release, no gated namespace, no
webhook configuration, no Pod still starting, the host's kernel parameters as they
were) and leaves the host as it found it, whatever order the files run in. A tier
starts in about half a minute with the image import; a module runs for minutes.

Without root or the tier's tools these tests are skipped with the reason; with
``ELB_GATE_SYSTEM_TIER=required`` (``make test-system``, CI) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.system_tier import REQUIRED_ENV, SystemTier, host_snapshot, unavailable

GATED = ("st-gate-a", "st-gate-b", "st-load")
"""The gated namespaces of the install (the chart's ``gatedNamespaces``)."""
VALUES = ("gatedNamespaces={" + ",".join(GATED) + "}",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = unavailable()
    if reason is None:
        return
    for item in items:
        if "tests/system/" not in str(item.fspath):
            continue
        if os.environ.get(REQUIRED_ENV) == "required":
            raise pytest.UsageError(f"the system tier is required here and cannot run: {reason}")
        item.add_marker(pytest.mark.skip(reason=f"system tier unavailable: {reason}"))


@pytest.fixture(scope="session")
def host_before() -> dict[str, Any]:
    """The host's state before the tier first starts."""
    return host_snapshot()


@pytest.fixture(scope="module")
def tier(host_before: dict[str, Any]) -> Iterator[SystemTier]:
    """A fresh tier for the module, stopped (host restored) when the module ends."""
    t = SystemTier.start()
    try:
        t.import_image()
        for ns in GATED:
            t.open_namespace(ns)
        yield t
    finally:
        t.stop()
