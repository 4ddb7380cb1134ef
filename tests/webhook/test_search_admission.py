"""Search admission (Gate A + Gate B) as a table: request, what was observed, decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from elbgate.identities import SubmitterIdentities
from elbgate.settings import Settings
from tests.builders import NOW, SETTINGS, admission, job, job_object, lease, user
from webhook.decision import WARNING_WIDTH, Decision
from webhook.review import AdmissionRequest, UserInfo
from webhook.search_admission import (
    JobRequest,
    Observed,
    Reads,
    decide,
    lease_needed,
    reads_needed,
    survey,
)

HOLDER = "dashboard-0b3f9a0e8a9d4f6c9f1e2d3c4b5a6978"
ALICE_HOLDS = lease(HOLDER, holder_user="alice")
IDENTITIES = SubmitterIdentities.parse(
    {
        "submitters": [
            {
                "name": "dashboard",
                "holderPrefix": "dashboard-",
                "users": ["alice", "system:serviceaccount:blast:dashboard"],
                "groups": ["blast-dashboard"],
            }
        ]
    }
)


def active(*ids: str) -> list[dict[str, Any]]:
    """One running blast Job per id: each id is an active search."""
    return [job("blast", i).build() for i in ids]


def create(app: str | None, id: str | None = None, who: UserInfo | None = None) -> AdmissionRequest:
    return admission("CREATE", job_object(app, id), who=who)


def update(
    app: str | None, id: str | None, old_app: str | None, old_id: str | None
) -> AdmissionRequest:
    return admission("UPDATE", job_object(app, id, "j"), job_object(old_app, old_id, "j"))


# -- what a request costs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "reads"),
    [
        pytest.param(
            admission("DELETE", None, job_object("finalizer", "a")),
            Reads.NONE,
            id="any DELETE of a Job costs no API call",
        ),
        pytest.param(create("other"), Reads.NONE, id="a Job that is not a search Job"),
        pytest.param(
            create("Blast", "a"), Reads.NONE, id="a near-miss app is refused on the request alone"
        ),
        pytest.param(create(None), Reads.NONE, id="a Job with no labels"),
        pytest.param(
            update("blast", "a", "blast", "a"),
            Reads.NONE,
            id="an UPDATE that keeps app and elb-job-id (Job controller write)",
        ),
        pytest.param(
            update("other", "b", "other", "a"),
            Reads.NONE,
            id="an id change on a Job that is not a search Job",
        ),
        pytest.param(
            create("finalizer"),
            Reads.NONE,
            id="a finalizer with no elb-job-id is refused on the request alone",
        ),
        pytest.param(
            create("finalizer", "a"),
            Reads.JOBS_AND_LEASE,
            id="a finalizer needs the census and the Lease, read together",
        ),
        pytest.param(create("submit", "a"), Reads.JOBS, id="a submit Job reads the census first"),
        pytest.param(
            create("setup", "a"), Reads.JOBS, id="a setup Job of a search reads the census first"
        ),
        pytest.param(
            create("setup"),
            Reads.LEASE,
            id="a setup Job without elb-job-id that stages nothing needs only the Lease",
        ),
        pytest.param(create("blast", "a"), Reads.JOBS, id="a blast Job reads the census first"),
        pytest.param(
            update("blast", "b", "blast", "a"),
            Reads.JOBS,
            id="an UPDATE that changes elb-job-id is judged",
        ),
        pytest.param(
            update("finalizer", "a", "blast", "a"),
            Reads.JOBS_AND_LEASE,
            id="an UPDATE that makes a Job a finalizer is judged",
        ),
        pytest.param(
            update("blast", "a", None, None),
            Reads.JOBS,
            id="an UPDATE that adds a gated app label is judged",
        ),
    ],
)
def test_reads_needed(request_: AdmissionRequest, reads: Reads) -> None:
    assert reads_needed(JobRequest.from_admission(request_)) is reads


@pytest.mark.parametrize(
    ("request_", "jobs", "needed"),
    [
        (create("blast", "a"), active("a"), False),
        (create("submit", "a"), active("a"), False),
        (create("blast", "new"), active("a"), True),
        (create("blast", None), active("a"), True),
        (create("finalizer", "a"), active("a"), True),
    ],
    ids=[
        "a blast Job of an active search needs no Lease",
        "a submit Job of an active search needs no Lease",
        "the first Job of a new search needs the Lease",
        "a blast Job without elb-job-id is its own new search",
        "a finalizer always needs the Lease",
    ],
)
def test_lease_needed_after_the_census(
    request_: AdmissionRequest, jobs: list[dict[str, Any]], needed: bool
) -> None:
    job_request = JobRequest.from_admission(request_)
    assert lease_needed(job_request, survey(job_request, jobs, SETTINGS.gate, NOW)) is needed


# -- decisions ----------------------------------------------------------------------------


@dataclass
class Case:
    request: AdmissionRequest
    jobs: list[dict[str, Any]] | None = None
    lease: dict[str, Any] | None = None
    """The Lease as read (``None``: absent, or not read when Gate A does not apply)."""
    allowed: bool = True
    reason: str = "ok"
    code: int = 200
    says: tuple[str, ...] = ()
    identities: SubmitterIdentities = field(default_factory=SubmitterIdentities)


BOB = user("bob")
CASES: dict[str, Case] = {
    "DELETE of a finalizer is never gated": Case(
        admission("DELETE", None, job_object("finalizer", "a")), reason="not_gated"
    ),
    "a Job controller UPDATE passes without observation": Case(
        update("blast", "a", "blast", "a"), reason="not_gated"
    ),
    "a finalizer without elb-job-id is refused with 422 Invalid": Case(
        create("finalizer"),
        allowed=False,
        reason="missing_job_id",
        code=422,
        says=("app=finalizer", "no elb-job-id label", "set metadata.labels.elb-job-id"),
    ),
    "a finalizer with a blank elb-job-id is refused": Case(
        create("finalizer", "  "), allowed=False, reason="missing_job_id", code=422
    ),
    "an UPDATE that makes a Job a finalizer without elb-job-id is refused": Case(
        update("finalizer", None, "blast", None), allowed=False, reason="missing_job_id", code=422
    ),
    "the holder opens a search under the ceiling": Case(
        create("submit", "d"), active("a", "b"), ALICE_HOLDS
    ),
    "the holder's finalizer of a new search under the ceiling is admitted": Case(
        create("finalizer", "d"), active("a"), ALICE_HOLDS
    ),
    "the holder at the ceiling is refused by Gate B with the active ids": Case(
        create("submit", "d"),
        active("a", "b", "c"),
        ALICE_HOLDS,
        allowed=False,
        reason="ceiling",
        code=429,
        says=("Gate B", "3/3 searches", "(a, b, c)", "Retry when one of a, b, c completes"),
    ),
    "a finalizer of a new search at the ceiling is refused by Gate B": Case(
        create("finalizer", "d"),
        active("a", "b", "c"),
        ALICE_HOLDS,
        allowed=False,
        reason="ceiling",
        code=429,
    ),
    "a user not holding the Lease is refused by Gate A, naming holder and user": Case(
        create("submit", "d", BOB),
        [],
        ALICE_HOLDS,
        allowed=False,
        reason="not_holder",
        code=403,
        says=(
            "Gate A",
            "user bob does not hold Lease default/elb-blast-submit-default",
            f"held by {HOLDER} (user alice)",
            "expires 2026-11-29T12:15:25Z",
            "acquire Lease default/elb-blast-submit-default before running elastic-blast submit",
        ),
    ),
    "Gate A is judged before Gate B": Case(
        create("submit", "d", BOB),
        active("a", "b", "c"),
        ALICE_HOLDS,
        allowed=False,
        reason="not_holder",
        code=403,
    ),
    "no Lease at all is a Gate A refusal that says to acquire it": Case(
        create("finalizer", "d"),
        [],
        None,
        allowed=False,
        reason="no_lease",
        code=403,
        says=("does not exist", "acquire Lease default/elb-blast-submit-default"),
    ),
    "a free Lease is a Gate A refusal": Case(
        create("submit", "d"),
        [],
        lease(""),
        allowed=False,
        reason="no_lease",
        code=403,
        says=("not held by anyone",),
    ),
    "an expired Lease (past TTL and skew on the webhook clock) is refused": Case(
        create("submit", "d"),
        [],
        lease(HOLDER, holder_user="alice", renewed_ago=931),
        allowed=False,
        reason="lease_expired",
        code=403,
        says=("expired", "ago", "re-acquire"),
    ),
    "a Lease inside the skew margin still counts as held": Case(
        create("submit", "d"), [], lease(HOLDER, holder_user="alice", renewed_ago=920)
    ),
    "a blast Job of an active search passes without Lease and without Gate B": Case(
        create("blast", "a", user("system:serviceaccount:default:elb-submit")),
        active("a", "b", "c"),
        None,
        reason="joins_active",
    ),
    "the finalizer of an active search needs only Gate A, even at the ceiling": Case(
        create("finalizer", "a"), active("a", "b", "c"), ALICE_HOLDS, reason="joins_active"
    ),
    "the finalizer of an active search by a non-holder is refused": Case(
        create("finalizer", "a", BOB),
        active("a"),
        ALICE_HOLDS,
        allowed=False,
        reason="not_holder",
        code=403,
    ),
    "completed and orphaned work holds no slot": Case(
        create("submit", "d"),
        [
            *active("a", "b"),
            job("blast", "c").complete().build(),
            job("finalizer", "e").aged(3600).build(),
        ],
        ALICE_HOLDS,
    ),
    "a failed-but-retrying Job still holds its slot": Case(
        create("submit", "d"),
        [*active("a", "b"), job("blast", "c").failed_but_retrying().build()],
        ALICE_HOLDS,
        allowed=False,
        reason="ceiling",
        code=429,
    ),
    "another user of the holder's submitter passes Gate A": Case(
        create("finalizer", "d", user("system:serviceaccount:blast:dashboard")),
        [],
        ALICE_HOLDS,
        identities=IDENTITIES,
    ),
    "a member by group of the holder's submitter passes Gate A": Case(
        create("finalizer", "d", user("carol", groups=("blast-dashboard",))),
        [],
        ALICE_HOLDS,
        identities=IDENTITIES,
    ),
    "an unmapped user is told which submitter to map it to": Case(
        create("finalizer", "d", BOB),
        [],
        ALICE_HOLDS,
        allowed=False,
        reason="not_holder",
        code=403,
        says=("map user bob to submitter `dashboard` in ELB_GATE_SUBMITTER_IDENTITIES_FILE",),
        identities=IDENTITIES,
    ),
    "without a submitter for the prefix the hint names both users": Case(
        create("finalizer", "d", BOB),
        [],
        ALICE_HOLDS,
        allowed=False,
        reason="not_holder",
        code=403,
        says=("if bob and alice are one submit path, map both to one submitter",),
    ),
    "an unstamped Lease is held by nobody elb-gate knows": Case(
        create("finalizer", "d"),
        [],
        lease(HOLDER),
        allowed=False,
        reason="not_holder",
        code=403,
        says=("no holder-user stamp",),
    ),
    "app=Finalizer is refused with 422 naming the exact value": Case(
        create("Finalizer", "d"),
        allowed=False,
        reason="near_miss_label",
        code=422,
        says=("app=Finalizer: did you mean app=finalizer?", "set metadata.labels.app=finalizer"),
    ),
    "a Cyrillic look-alike of blast is refused and shown escaped": Case(
        create("bl\u0430st", "d"),
        allowed=False,
        reason="near_miss_label",
        code=422,
        says=("app=bl\\u0430st: did you mean app=blast?",),
    ),
    "a zero-width space in elb-job-id is refused naming the clean id": Case(
        create("blast", "job-0a1b\u200b"),
        allowed=False,
        reason="near_miss_label",
        code=422,
        says=("zero width space (U+200B)", "did you mean elb-job-id=job-0a1b?"),
    ),
    "a new id differing from an active one only in case is refused naming it": Case(
        create("submit", "JOB-0A1B"),
        active("job-0a1b"),
        ALICE_HOLDS,
        allowed=False,
        reason="near_miss_label",
        code=422,
        says=("differs from active search job-0a1b", "did you mean elb-job-id=job-0a1b?"),
    ),
    "a Job controller UPDATE of a near-miss Job passes untouched": Case(
        update("Blast", "a", "Blast", "a"), reason="not_gated"
    ),
    "an UPDATE relabelling a Job to a near miss is refused": Case(
        update("SUBMIT", "a", "web", "a"), allowed=False, reason="near_miss_label", code=422
    ),
    "an UPDATE moving a Job to a new id does not count its own old search": Case(
        update("blast", "d", "blast", "a"),
        [job("blast", "a", "j").build(), *active("b", "c")],
        ALICE_HOLDS,
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_search_admission(case: Case) -> None:
    job_request = JobRequest.from_admission(case.request)
    seen = None if case.jobs is None else survey(job_request, case.jobs, SETTINGS.gate, NOW)
    decision = decide(
        job_request, Observed(seen, case.lease), SETTINGS.gate, SETTINGS.rules, NOW, case.identities
    )
    assert (decision.allowed, decision.reason, decision.code) == (
        case.allowed,
        case.reason,
        case.code,
    ), decision.message
    for phrase in case.says:
        assert phrase in decision.message
    if not decision.allowed:
        assert "\n" not in decision.message


def judge(
    request_: AdmissionRequest,
    jobs: list[dict[str, Any]],
    lease_obj: Any,
    settings: Settings = SETTINGS,
) -> Decision:
    """Survey ``jobs`` and decide, as the handler does."""
    job_request = JobRequest.from_admission(request_)
    seen = survey(job_request, jobs, settings.gate, NOW)
    return decide(job_request, Observed(seen, lease_obj), settings.gate, settings.rules, NOW)


def test_a_denial_names_the_requested_job() -> None:
    decision = judge(create("finalizer", "d", BOB), [], ALICE_HOLDS)
    assert "Job default/finalizer-d (app=finalizer, elb-job-id=d)" in decision.message


def test_the_ceiling_comes_from_settings() -> None:
    decision = judge(
        create("submit", "c"), active("a", "b"), ALICE_HOLDS, Settings.of(max_run_concurrency=2)
    )
    assert decision.code == 429 and "2/2 searches" in decision.message


def test_warn_mode_carries_the_denial_as_short_warnings() -> None:
    decision = judge(create("submit", "d", BOB), active("a", "b", "c"), ALICE_HOLDS)
    response = decision.warning_response("search-admission.elb-gate.io")
    assert response.allowed
    assert response.warnings and all(len(w) <= WARNING_WIDTH for w in response.warnings)
    assert " ".join(response.warnings).endswith(decision.message.split()[-1])
    assert "would deny" in response.warnings[0]
