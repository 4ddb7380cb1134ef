"""A Job's status read as the Job controller (Kubernetes 1.30 to 1.37) writes it."""

from __future__ import annotations

from typing import Any

import pytest

from elbgate.job_status import is_suspended, is_terminal, required_completions, runs_one_pod


def job(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return {"spec": spec or {}, "status": status}


def cond(kind: str, value: str = "True") -> dict[str, str]:
    return {"type": kind, "status": value}


ONE = {"completions": 1, "parallelism": 1}
THREE = {"completions": 3, "parallelism": 3}
WORK_QUEUE = {"parallelism": 3}


@pytest.mark.parametrize(
    ("body", "terminal"),
    [
        pytest.param(job(ONE, active=1), False, id="one-pod Job running"),
        pytest.param(job(ONE, succeeded=1), True, id="one-pod Job whose pod succeeded"),
        pytest.param(job({}, succeeded=1), True, id="no completions set: the default is 1"),
        pytest.param(
            job(THREE, succeeded=1, active=2),
            False,
            id="completions 3, one succeeded: still running",
        ),
        pytest.param(job(THREE, succeeded=2, active=1), False, id="completions 3, two succeeded"),
        pytest.param(job(THREE, succeeded=3), True, id="completions 3, three succeeded"),
        pytest.param(
            job(WORK_QUEUE, succeeded=1, active=2),
            False,
            id="work queue: a success, pods still active",
        ),
        pytest.param(
            job(WORK_QUEUE, succeeded=1, active=0), True, id="work queue: a success and no pod left"
        ),
        pytest.param(
            job(ONE, succeeded=1, conditions=[cond("SuccessCriteriaMet")], terminating=0),
            True,
            id="SuccessCriteriaMet and no pod terminating",
        ),
        pytest.param(
            job(THREE, succeeded=2, conditions=[cond("SuccessCriteriaMet")], terminating=1),
            False,
            id="SuccessCriteriaMet while a pod still terminates (1.31+: Complete comes after)",
        ),
        pytest.param(
            job(ONE, failed=1, conditions=[cond("FailureTarget")], terminating=1),
            False,
            id="FailureTarget while the controller is still killing a pod",
        ),
        pytest.param(
            job(ONE, failed=1, conditions=[cond("FailureTarget")]),
            True,
            id="FailureTarget with no terminating count (pods gone, Failed follows)",
        ),
        pytest.param(
            job(ONE, failed=4, conditions=[cond("FailureTarget"), cond("Failed")]),
            True,
            id="Failed",
        ),
        pytest.param(
            job(
                THREE,
                succeeded=3,
                conditions=[cond("SuccessCriteriaMet"), cond("Complete")],
                completionTime="2026-11-29T11:00:00Z",
            ),
            True,
            id="Complete with completionTime",
        ),
        pytest.param(
            job(ONE, conditions=[cond("Complete")], terminating=2),
            True,
            id="Complete is final even where an older controller wrote it with pods terminating",
        ),
        pytest.param(
            job(ONE, failed=3, active=1), False, id="failures below backoffLimit: retrying"
        ),
        pytest.param(
            job({**ONE, "suspend": True}, conditions=[cond("Suspended")]),
            False,
            id="suspended: no pod, but it resumes without passing a gate",
        ),
        pytest.param(
            job(ONE, succeeded=0, terminating=1), False, id="a pod terminating, nothing decided"
        ),
        pytest.param(
            job(ONE, conditions=[cond("SuccessCriteriaMet", "False")]),
            False,
            id="a False condition decides nothing",
        ),
        pytest.param(job(ONE, succeeded=True), False, id="a wrongly typed count is no proof"),
    ],
)
def test_terminal_as_the_job_controller_writes_it(body: dict[str, Any], terminal: bool) -> None:
    assert is_terminal(body) is terminal


@pytest.mark.parametrize(
    ("spec", "completions", "one_pod"),
    [
        ({}, 1, True),
        (ONE, 1, True),
        ({"parallelism": 1}, 1, True),
        (THREE, 3, False),
        ({"completions": 2}, 2, False),
        (WORK_QUEUE, None, False),
        ({"completions": 0}, 1, True),
    ],
)
def test_what_a_success_needs(spec: dict[str, Any], completions: int | None, one_pod: bool) -> None:
    assert required_completions({"spec": spec}) == completions
    assert runs_one_pod({"spec": spec}) is one_pod


def test_suspension_is_read_from_the_condition_or_the_spec() -> None:
    assert is_suspended(job(ONE, conditions=[cond("Suspended")]))
    assert is_suspended(job({**ONE, "suspend": True}))
    assert not is_suspended(job(ONE, conditions=[cond("Suspended", "False")]))
