"""Promise 2: fail closed. Faults on every API call the webhook and the controller make
never admit a gated Job without a completed check, and never make the controller clear
or delete on partial data."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.kube_emulator import User
from tests.reliability.cluster import Rig
from tests.reliability.fault_trials import (
    CONTROLLER_NS,
    FAULTY_ENV,
    WEBHOOK_NS,
    TrialResult,
    controller_trial,
    webhook_trial,
)
from tests.reliability.ledger import LEDGER

WEBHOOK_TRIALS = 40
CONTROLLER_TRIALS = 4


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with Rig([WEBHOOK_NS, CONTROLLER_NS], env=FAULTY_ENV, users=[User.plain("alice")]) as started:
        started.wait_until_ready()
        yield started


def record(results: list[TrialResult]) -> None:
    kinds: Counter[str] = Counter(r.kind.split(":")[0] for r in results)
    LEDGER.record(
        "2",
        runs=len(results),
        faults=sum(r.faults for r in results),
        violations=sum(len(r.wrong) for r in results),
        **{f"{k}_trials": v for k, v in kinds.items()},
    )


def test_no_gated_job_is_admitted_while_the_webhooks_reads_fail(rig: Rig) -> None:
    rng = random.Random(2002)
    results = [webhook_trial(rig, WEBHOOK_NS, rng) for _ in range(WEBHOOK_TRIALS)]
    record(results)
    codes: Counter[int] = Counter()
    for r in results:
        codes.update(r.codes)
    LEDGER.record("2", **{f"webhook_refused_{code}": n for code, n in codes.items()})
    assert [w for r in results for w in r.wrong] == []
    assert sum(r.faults for r in results) >= WEBHOOK_TRIALS
    assert all(r.recovered for r in results)
    kinds = {r.kind.rsplit(":", 1)[1] for r in results}
    assert kinds == {"500", "503", "429", "504", "hang", "drop"}


def test_the_controller_never_clears_or_deletes_on_partial_data(rig: Rig) -> None:
    rng = random.Random(2003)
    results = [controller_trial(rig, CONTROLLER_NS, rng) for _ in range(CONTROLLER_TRIALS)]
    record(results)
    LEDGER.maximum("2", controller_recovery_seconds=max(r.recovery_seconds for r in results))
    assert [w for r in results for w in r.wrong] == []
    assert sum(r.faults for r in results) > 0
    assert all(r.recovered for r in results)
