"""Promise 2: fail closed. Faults on the API calls the webhook and the controller make
(through a TLS proxy in front of the real API server) never admit a gated Job without a
completed check, and never make the controller clear or delete on partial data."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest

from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.reliability.faults import (
    FAULTY_ENV,
    Holder,
    controller_trial,
    record,
    webhook_trial,
)
from testbed.reliability.ledger import LEDGER
from testbed.reliability.rig import Rig

WEBHOOK_TRIALS = 30
CONTROLLER_TRIALS = 3


@pytest.fixture(scope="module")
def namespaces(control_plane: ControlPlane) -> tuple[str, str]:
    return control_plane.new_namespace("faults-hook"), control_plane.new_namespace("faults-ctl")


@pytest.fixture(scope="module")
def rig(
    control_plane: ControlPlane, proxy: FaultProxy, namespaces: tuple[str, str]
) -> Iterator[Rig]:
    with Rig(control_plane, namespaces, replicas=1, env=FAULTY_ENV, proxy=proxy) as started:
        started.wait_until_ready()
        yield started


@pytest.fixture(scope="module")
def alice(rig: Rig, namespaces: tuple[str, str]) -> Iterator[Holder]:
    """alice holds the webhook trials' Lease (taken through the webhook, so stamped)."""
    holder = Holder(rig.cp, namespaces[0], rig.cp.token("alice"))
    yield holder
    holder.stop()


def test_no_gated_job_is_admitted_while_the_webhooks_reads_fail(
    rig: Rig, proxy: FaultProxy, alice: Holder, namespaces: tuple[str, str]
) -> None:
    rng = random.Random(2002)
    results = [webhook_trial(rig, proxy, alice, namespaces[0], rng) for _ in range(WEBHOOK_TRIALS)]
    record(results, LEDGER)
    codes: Counter[int] = Counter()
    for r in results:
        codes.update(r.codes)
    LEDGER.record("2", **{f"webhook_refused_{code}": n for code, n in codes.items()})
    assert [w for r in results for w in r.wrong] == []
    assert sum(r.faults for r in results) >= WEBHOOK_TRIALS
    assert all(r.recovered for r in results)
    kinds = {r.kind.rsplit(":", 1)[1] for r in results}
    assert kinds == {"500", "503", "429", "504", "hang", "drop"}


def test_the_controller_never_clears_or_deletes_on_partial_data(
    rig: Rig, proxy: FaultProxy, namespaces: tuple[str, str]
) -> None:
    rng = random.Random(2003)
    results = [controller_trial(rig, proxy, namespaces[1], rng) for _ in range(CONTROLLER_TRIALS)]
    record(results, LEDGER)
    LEDGER.maximum("2", controller_recovery_seconds=max(r.recovery_seconds for r in results))
    assert [w for r in results for w in r.wrong] == []
    assert sum(r.faults for r in results) > 0
    assert all(r.recovered for r in results)
