"""Admission is linearizable: histories recorded on the real control plane, checked by
porcupine against a sequential model of the gates written from docs/design.md.

Every race kind of :mod:`testbed.reliability.races` runs several times, on two webhook
replicas behind a router that picks one per request (half the histories have their
race's two first Jobs judged by the two replicas at once, half by one), whose API calls
go through a fault proxy, with the controller (stopped across a batch TTL for one
kind). Each history holds what the API server recorded — every Job create's admission
with its request and answer times, every Job delete and submit Lease write, every Job
finishing — and the checker (``lincheck/``) must find an order of it that the model
allows.
"""

from __future__ import annotations

import ast
import copy
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.controlplane import ControlPlane
from testbed.reliability.histories import History, Verdict, check
from testbed.reliability.ledger import LEDGER
from testbed.reliability.races import KINDS, overlapping, races_on, run_all

REPO = Path(__file__).resolve().parents[2]
CI_RACE_SEEDS = tuple(range(1, 1 + 4 * len(KINDS)))
"""Four histories of each kind (the kind is the seed modulo the kinds)."""
SLOTS = 4

pytestmark = [pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def histories(control_plane: ControlPlane) -> Iterator[list[History]]:
    slots = [control_plane.new_namespace("lin") for _ in range(SLOTS)]
    with races_on(control_plane, slots) as races:
        yield run_all(races, CI_RACE_SEEDS, slots)


@pytest.fixture(scope="module")
def verdicts(histories: list[History]) -> list[Verdict]:
    dump = os.environ.get("ELB_GATE_HISTORIES")
    if dump:  # the recorded histories, one JSON a line: `lincheck -pictures DIR < FILE`
        Path(dump).write_text("".join(h.to_json() + "\n" for h in histories))
    found = check(histories)
    LEDGER.record(
        "1",
        linearizability_histories=len(found),
        linearizability_violations=sum(v.result == "Illegal" for v in found),
    )
    return found


def test_every_kind_was_recorded_with_races_admitted_and_refused(histories: list[History]) -> None:
    assert Counter(h.kind for h in histories) == Counter({k: 4 for k in KINDS})
    totals: Counter[str] = Counter()
    for h in histories:
        totals.update(h.counts())
    assert totals["admitted"] > 0 and totals["refused"] > 0
    per_kind: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
    for h in histories:
        per_kind[h.kind].update(h.counts())
    assert all(c["admitted"] > 0 for c in per_kind.values()), per_kind
    for kind in ("one_identity", "siblings", "stagings", "stalled_wakes"):
        assert per_kind[kind]["refused"] > 0, (kind, per_kind[kind])
    for kind in ("controller_down_ttl", "finalizer_grace"):  # the TTL controller deleted
        assert per_kind[kind]["deletes"] > 0, (kind, per_kind[kind])
    assert totals["finishes"] > 0 and totals["deletes"] > 0 and totals["lease_writes"] > 0
    # Every kind sends two first Jobs at once: some history of each has two creates in
    # the API server together.
    raced = {h.kind for h in histories if any(overlapping(h.operations))}
    assert raced == set(KINDS), raced
    # In the paired histories (two of each kind) the router held the race's two first
    # Jobs until both had come and sent one to each replica: the API server held both
    # creates at once and the two replicas judged one each, in every one of them. In
    # the others one replica judged every request.
    assert {h.kind for h in histories if h.paired} == set(KINDS)
    assert [h.name for h in histories if h.paired != h.split] == []
    assert sum(h.fault_fired for h in histories) > 0  # the webhooks' API calls were faulted


def test_every_history_is_linearizable(verdicts: list[Verdict]) -> None:
    assert len(verdicts) == len(CI_RACE_SEEDS)
    wrong = [f"{v.name}: {v.result}: {'; '.join(v.why)}" for v in verdicts if v.result != "Ok"]
    assert not wrong, "\n".join(wrong)


def test_the_checker_finds_the_over_admission_when_refusals_are_turned_into_admissions(
    histories: list[History],
) -> None:
    """The same recorded histories, with every refusal of a race made an admission: a
    run of the gates that admits both halves of a race at the ceiling is one the model
    rules out, so the checker must say so (it can fail)."""
    forged = []
    for h in histories:
        if h.kind not in ("one_identity", "stagings"):
            continue
        f = copy.deepcopy(h)
        for op in f.operations:
            if op["kind"] == "create" and not op["_output"]["admitted"]:
                op["_output"] = {"admitted": True, "answer": "forged"}
        forged.append(f)
    found = check(forged)
    assert any(v.result == "Illegal" for v in found), found
    assert any("Gate B" in w or "staging" in w for v in found for w in v.why)


PRODUCT = {"elbgate", "webhook", "controller", "client"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module or "")
    return found


def test_the_recorder_and_the_model_import_nothing_from_the_code_they_judge() -> None:
    """The recorder (and what it imports from the testbed, transitively) and the Go
    model read Jobs and Leases themselves: a misreading shared with the product would
    hide the bug it is there to find."""
    seen: set[str] = set()
    todo = ["testbed.reliability.histories"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = REPO / (name.replace(".", "/") + ".py")
        if path.exists():
            todo += [m for m in _imports(path) if m.split(".")[0] in PRODUCT | {"testbed"}]
    assert not {m for m in seen if m.split(".")[0] in PRODUCT}, seen
    for source in (REPO / "lincheck").glob("*.go"):
        text = source.read_text()
        assert "elb-gate/elb-gate/" not in text.replace("elb-gate/elb-gate/lincheck", "")
    assert (REPO / "lincheck" / "go.sum").read_text().count("anishathalye/porcupine") == 2


def test_the_model_rules_out_what_the_design_forbids() -> None:
    """lincheck's own table (``lincheck/model_test.go``): two openings at one below the
    ceiling, an opening before the finish that freed its slot, a Job after its hold
    expired on the API server's clock or from another user, two searches staging one
    database, the controller deleting a running finalizer — each rejected, and the
    legal neighbour of each accepted."""
    done = subprocess.run(
        ["go", "test", "-count=1", "./..."],
        cwd=REPO / "lincheck",
        env={**os.environ, "GOFLAGS": "-mod=readonly"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_finish_whose_final_condition_never_came_is_checked() -> None:
    """A Job decided but not yet finished when the history ends: its finish has no
    return, which the checker must read (it failed on a return beyond an int64)."""
    from testbed.reliability.histories import NEVER
    from testbed.reliability.races import settings

    h = History("never", "unit", settings())
    h.operations = [{"kind": "finish", "job": {"name": "a"}, "call": 1, "return": NEVER}]
    assert [v.result for v in check([h])] == ["Ok"]
