"""The handlers with a fake API: what each request costs, fail-closed reads, warn mode, metrics."""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from elbgate.kube.api import ApiError, ApiUnavailable
from elbgate.lease import LeaseView, format_microtime
from elbgate.names import SEARCH_JOB_SELECTOR, UNFINISHED_JOB_FIELD_SELECTOR
from elbgate.settings import Settings
from testbed.elastic_blast import import_queries, init_ssd
from tests.builders import NOW, SETTINGS, admission, job, job_object, lease, review, user
from tests.webhook.test_node_rules import AKS, POOL
from webhook.admission import Admission
from webhook.http import Runtime, create_app, create_ops_app
from webhook.metrics import WebhookMetrics
from webhook.node_rules import NodesSeen
from webhook.readiness import ApiReachability
from webhook.review import AdmissionRequest
from webhook.tls import ServingCertificate

HOLDER = "dashboard-0b3f9a0e8a9d4f6c9f1e2d3c4b5a6978"


class FakeApi:
    """Answers the census LIST, the Lease GET and the admission record from memory,
    recording every call. The record is a ConfigMap with a resourceVersion: a write that
    names another one (or creates one that exists) is a 409, as the API server answers."""

    def __init__(
        self,
        jobs: list[dict[str, Any]] | None = None,
        lease_obj: dict[str, Any] | None = None,
        fail: dict[str, Exception] | None = None,
        require_concurrency: bool = False,
        record: dict[str, Any] | None = None,
        conflicts: int = 0,
    ) -> None:
        self.jobs = jobs or []
        self.lease = lease_obj
        self.fail = fail or {}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self._require_concurrency = require_concurrency
        self._in_flight = 0
        self._both = asyncio.Event()
        self.record = record
        self.conflicts = conflicts
        """Writes of the record that another admission "wins" first (409 each)."""
        self.written: list[dict[str, Any]] = []
        self.stored_jobs: dict[str, dict[str, Any]] = {}
        """Jobs a GET by name finds (the census LIST shows only ``jobs``)."""

    async def _enter(self, verb: str, path: str, kw: dict[str, Any]) -> None:
        self.calls.append((verb, path, kw))
        if self._require_concurrency and verb in ("list", "get"):
            # Sequential reads would wait here forever: both must be in flight at once.
            self._in_flight += 1
            if self._in_flight == 2:
                self._both.set()
            await asyncio.wait_for(self._both.wait(), 10)
        if verb in self.fail:
            raise self.fail[verb]

    async def list_objects(self, path: str, **kw: Any) -> dict[str, Any]:
        await self._enter("list", path, kw)
        return {"items": self.jobs}

    async def get_or_none(self, path: str, **kw: Any) -> dict[str, Any] | None:
        if "/jobs/" in path:
            await self._enter("job", path, kw)
            return self.stored_jobs.get(path.rsplit("/", 1)[-1])
        if "/configmaps/" in path:
            await self._enter("record", path, kw)
            return copy.deepcopy(self.record)
        await self._enter("get", path, kw)
        return self.lease

    async def get(self, path: str, **kw: Any) -> dict[str, Any]:
        await self._enter("probe", path, kw)
        return {"major": "1"}

    def _store(self, body: dict[str, Any], expected: str) -> dict[str, Any]:
        current = (self.record or {}).get("metadata", {}).get("resourceVersion", "")
        if self.conflicts or current != expected:
            self.conflicts = max(0, self.conflicts - 1)
            # Another admission's write: the stored record moves on.
            if self.record is not None:
                self.record["metadata"]["resourceVersion"] = str(int(current) + 1)
            else:
                self.record = {"metadata": {"resourceVersion": "1"}, "data": {}}
            raise ApiError(409, "Conflict", "the object has been modified")
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(int(current or "0") + 1)
        self.record = stored
        self.written.append(stored)
        return stored

    async def replace(self, path: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        await self._enter("write", path, kw)
        return self._store(body, body["metadata"]["resourceVersion"])

    async def create(self, path: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        await self._enter("write", path, kw)
        return self._store(body, "")

    async def open(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.closed = True


def make(api: FakeApi, **settings: Any) -> Admission:
    chosen = Settings.of(**settings)
    return Admission(
        chosen.gate,
        chosen.webhook,
        chosen.rules,
        api,  # type: ignore[arg-type]
        WebhookMetrics(CollectorRegistry()),
        clock=lambda: NOW,
    )


def sample(admission: Admission, name: str, **labels: str) -> float:
    return admission.metrics.registry.get_sample_value(name, labels) or 0.0


def alice_holds() -> dict[str, Any]:
    return lease(HOLDER, holder_user="alice")


# -- what a request costs ----------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        admission("UPDATE", job_object("blast", "a", "j"), job_object("blast", "a", "j")),
        admission("DELETE", None, job_object("finalizer", "a")),
        admission("CREATE", job_object("other")),
    ],
    ids=["a Job controller UPDATE", "a DELETE", "a Job that is not a search Job"],
)
async def test_a_non_gated_job_request_costs_no_api_call(request_: AdmissionRequest) -> None:
    api = FakeApi()
    response = (await make(api).validate_job(request_)).response
    assert response.allowed and api.calls == []


async def test_leases_never_cost_an_api_call() -> None:
    api = FakeApi()
    handlers = make(api)
    other = lease(HOLDER, name="kube-scheduler")
    submit = lease(HOLDER, holder_user="alice")
    for request_ in (
        admission("UPDATE", other, other, resource="leases"),
        admission("UPDATE", submit, submit, resource="leases"),
    ):
        assert ((await handlers.mutate_lease(request_)).response).allowed
        assert ((await handlers.validate_lease(request_)).response).allowed
    assert api.calls == []


def evidence(*job_ids: str) -> dict[str, Any]:
    """A record that already holds the batch-work evidence of ``job_ids``."""
    found = {i: f"{format_microtime(NOW)} blast/first-{i}" for i in job_ids}
    return {
        "metadata": {"name": "elb-gate-admissions", "resourceVersion": "4"},
        "data": {"reservations.json": "[]", "batch-work.json": json.dumps(found)},
    }


async def test_a_blast_job_of_an_active_search_reads_the_record_then_the_census_only() -> None:
    api = FakeApi(jobs=[job("blast", "a").build()], record=evidence("a"))
    response = (
        await make(api, api_timeout_seconds=0.75).validate_job(
            admission("CREATE", job_object("blast", "a"), who=user("system:serviceaccount:x:y"))
        )
    ).response
    assert response.allowed
    # It adds nothing a later decision reads (its search is active already): no write.
    assert [c[0] for c in api.calls] == ["record", "list"]
    assert api.calls[0][1] == "/api/v1/namespaces/default/configmaps/elb-gate-admissions"
    _, path, kw = api.calls[1]
    assert path == "/apis/batch/v1/namespaces/default/jobs"
    assert kw == {
        "label_selector": SEARCH_JOB_SELECTOR,
        "field_selector": UNFINISHED_JOB_FIELD_SELECTOR,
        "deadline": 0.75,
    }


async def test_the_first_job_of_a_search_reads_the_lease_after_the_census_and_records_itself() -> (
    None
):
    api = FakeApi(lease_obj=alice_holds())
    response = (
        await make(api).validate_job(admission("CREATE", job_object("submit", "new")))
    ).response
    assert response.allowed
    assert [c[0] for c in api.calls] == ["record", "list", "get", "write"]
    assert api.calls[2][1].endswith("/leases/elb-blast-submit-default")
    (written,) = api.written
    assert written["metadata"]["name"] == "elb-gate-admissions"
    (entry,) = json.loads(written["data"]["reservations.json"])
    assert (entry["app"], entry["elbJobId"]) == ("submit", "new")


class _SlowApi(FakeApi):
    """The API answers ``slow_verb`` only after the webhook's clock has passed ``late``:
    the hold it read was in force when the admission began, not when it answers."""

    def __init__(self, clock: list[datetime], late: datetime, slow_verb: str, **kw: Any) -> None:
        super().__init__(**kw)
        self._clock, self._late, self._slow = clock, late, slow_verb

    async def _enter(self, verb: str, path: str, kw: dict[str, Any]) -> None:
        await super()._enter(verb, path, kw)
        if verb == self._slow:
            self._clock[0] = self._late


@pytest.mark.parametrize(
    ("body", "slow_verb"),
    [
        (job_object("submit", "new"), "write"),  # opens a search: the record written last
        (job_object("finalizer", "new"), "get"),  # judged on the census and the Lease
        (import_queries(), "get"),  # the holder's own Job: the Lease alone
    ],
    ids=["search-opener", "finalizer", "import-queries"],
)
async def test_a_hold_that_expires_while_the_webhook_reads_and_writes_admits_nothing(
    body: dict[str, Any], slow_verb: str
) -> None:
    """Gate A is judged on the clock as the webhook answers, not as it began: a takeover
    may commit from the Lease's expiry on, so a Job allowed on a hold that expired
    meanwhile could commit under the next holder."""
    held = alice_holds()
    expiry = SETTINGS.gate.expiry.at(LeaseView.from_dict(held))
    assert isinstance(expiry, datetime)
    clock = [NOW]
    api = _SlowApi(clock, expiry, slow_verb, lease_obj=held)
    admission_ = make(api)
    admission_.clock = lambda: clock[0]
    response = (await admission_.validate_job(admission("CREATE", body))).response
    assert not response.allowed
    assert response.code == 403
    assert "Gate A" in response.message and "expired" in response.message
    assert slow_verb in [c[0] for c in api.calls]


async def test_import_queries_of_the_holder_reads_only_the_lease() -> None:
    api = FakeApi(lease_obj=alice_holds())
    response = (await make(api).validate_job(admission("CREATE", import_queries()))).response
    assert response.allowed
    assert [c[0] for c in api.calls] == ["get"]


async def test_a_rule_in_warn_mode_admits_with_the_warning_and_counts_a_would_deny() -> None:
    staging_job = init_ssd("job-1", 0, "core_nt")
    api = FakeApi(jobs=[staging_job], lease_obj=alice_holds())
    handlers = make(api, db_staging="warn")
    response = (
        await handlers.validate_job(admission("CREATE", init_ssd("job-2", 0, "core_nt")))
    ).response
    assert response.allowed
    assert response.warnings and "would deny: DB staging:" in response.warnings[0]
    labels = {"webhook": "search-admission.elb-gate.io", "reason": "db_staging"}
    assert sample(handlers, "elb_gate_would_deny_total", **labels) == 1


async def test_a_finalizer_reads_census_and_lease_concurrently() -> None:
    api = FakeApi(lease_obj=alice_holds(), require_concurrency=True)
    response = (
        await make(api).validate_job(admission("CREATE", job_object("finalizer", "a")))
    ).response
    assert response.allowed, response.message
    assert api.calls[0][0] == "record" and sorted(c[0] for c in api.calls[1:3]) == ["get", "list"]


# -- the admission record ------------------------------------------------------------------


def record_of(*entries: dict[str, Any], version: str = "7") -> dict[str, Any]:
    return {
        "metadata": {"name": "elb-gate-admissions", "resourceVersion": version},
        "data": {"reservations.json": json.dumps(list(entries))},
    }


def entry(name: str, app: str, job_id: str, *, admitted_ago: float = 1, left: float = 60) -> dict:
    return {
        "job": name,
        "app": app,
        "elbJobId": job_id,
        "stages": [],
        "uses": [],
        "admitted": format_microtime(NOW - timedelta(seconds=admitted_ago)),
        "expires": format_microtime(NOW + timedelta(seconds=left)),
    }


async def test_a_reserved_job_the_list_does_not_show_yet_counts_against_the_ceiling() -> None:
    api = FakeApi(
        jobs=[job("blast", i).build() for i in "ab"],
        lease_obj=alice_holds(),
        record=record_of(entry("submit-jobs-c", "submit", "c")),
    )
    answer = await make(api).validate_job(admission("CREATE", job_object("submit", "d")))
    assert (answer.outcome, answer.decision.reason) == ("denied", "ceiling")
    assert "Gate B: 3/3 searches already active" in answer.response.message
    assert "a, b, c" in answer.response.message
    assert api.written == []


async def test_an_expired_or_listed_reservation_no_longer_counts_and_is_dropped() -> None:
    api = FakeApi(
        jobs=[job("blast", i).build() for i in "ab"],
        lease_obj=alice_holds(),
        record=record_of(
            entry("submit-jobs-c", "submit", "c", admitted_ago=200, left=-1),
            entry(job("blast", "a").build()["metadata"]["name"], "blast", "a"),
        ),
    )
    answer = await make(api).validate_job(admission("CREATE", job_object("submit", "d")))
    assert answer.outcome == "allowed", answer.response.message
    (written,) = api.written
    assert written["metadata"]["resourceVersion"] == "8"  # the CAS named "7"
    assert [e["elbJobId"] for e in json.loads(written["data"]["reservations.json"])] == ["d"]


async def test_a_reserved_job_a_get_shows_finished_no_longer_counts_and_is_dropped() -> None:
    # It succeeded before any LIST showed it (the census LIST skips succeeded Jobs).
    api = FakeApi(
        jobs=[job("blast", i).build() for i in "ab"],
        lease_obj=alice_holds(),
        record=record_of(entry("submit-jobs-c", "submit", "c")),
    )
    api.stored_jobs["submit-jobs-c"] = job("submit", "c").build() | {
        "status": {"succeeded": 1, "completionTime": "2026-11-29T11:59:00Z"}
    }
    answer = await make(api).validate_job(admission("CREATE", job_object("submit", "d")))
    assert answer.outcome == "allowed", answer.response.message
    assert ("job", "/apis/batch/v1/namespaces/default/jobs/submit-jobs-c") in [
        c[:2] for c in api.calls
    ]
    (written,) = api.written
    assert [e["elbJobId"] for e in json.loads(written["data"]["reservations.json"])] == ["d"]


async def test_a_lost_write_reads_and_decides_again() -> None:
    api = FakeApi(jobs=[job("blast", "a").build()], lease_obj=alice_holds(), conflicts=2)
    answer = await make(api).validate_job(admission("CREATE", job_object("submit", "d")))
    assert answer.outcome == "allowed", answer.response.message
    assert [c[0] for c in api.calls].count("record") == 3
    assert [c[0] for c in api.calls].count("write") == 3 and len(api.written) == 1


async def test_a_write_lost_on_every_attempt_is_a_503() -> None:
    api = FakeApi(lease_obj=alice_holds(), conflicts=99)
    answer = await make(api).validate_job(admission("CREATE", job_object("submit", "d")))
    assert (answer.response.code, answer.decision.reason) == (503, "unverified")
    assert (
        "ConfigMap default/elb-gate-admissions was changed by 5 other admissions in a row"
        in answer.response.message
    )
    assert api.written == []


async def test_a_failed_write_of_the_record_is_a_503_never_an_admit() -> None:
    api = FakeApi(lease_obj=alice_holds(), fail={"write": ApiError(403, "Forbidden", "nope")})
    answer = await make(api).validate_job(admission("CREATE", job_object("submit", "d")))
    assert (answer.response.code, answer.decision.reason) == (503, "unverified")
    assert (
        "write ConfigMap default/elb-gate-admissions: API answered 403" in answer.response.message
    )


async def test_an_unreadable_record_is_a_503_that_says_to_delete_it() -> None:
    broken = {"metadata": {"resourceVersion": "3"}, "data": {"reservations.json": "{nope"}}
    api = FakeApi(lease_obj=alice_holds(), record=broken)
    answer = await make(api).validate_job(admission("CREATE", job_object("submit", "d")))
    assert (answer.response.code, answer.decision.reason) == (503, "unverified")
    assert "is not what elb-gate writes" in answer.response.message
    assert "delete it" in answer.response.message


async def test_a_dry_run_writes_nothing() -> None:
    api = FakeApi(lease_obj=alice_holds())
    answer = await make(api).validate_job(
        admission("CREATE", job_object("submit", "d"), dry_run=True)
    )
    assert answer.outcome == "allowed"
    assert "write" not in [c[0] for c in api.calls]


async def test_a_second_staging_job_of_one_search_adds_nothing_and_writes_nothing() -> None:
    first = init_ssd("job-1", 0, "core_nt")
    api = FakeApi(jobs=[first], lease_obj=alice_holds(), record=evidence("job-1"))
    answer = await make(api).validate_job(admission("CREATE", init_ssd("job-1", 1, "core_nt")))
    assert answer.outcome == "allowed", answer.response.message
    assert api.written == []


async def test_the_first_batch_work_of_a_search_opened_by_its_finalizer_is_recorded_once() -> None:
    api = FakeApi(jobs=[job("finalizer", "a").build()])
    handlers = make(api)
    in_cluster = user("system:serviceaccount:x:y")
    for name in ("b0", "b1"):
        answer = await handlers.validate_job(
            admission("CREATE", job_object("blast", "a", name), who=in_cluster)
        )
        assert answer.outcome == "allowed", answer.response.message
    (written,) = api.written  # the second found the evidence already recorded
    found = json.loads(written["data"]["batch-work.json"])
    assert list(found) == ["a"] and found["a"].endswith(" blast/b0")
    # It joins a search already active: it reserves nothing, it only records the work.
    assert json.loads(written["data"]["reservations.json"]) == []


async def test_evidence_of_a_search_with_no_job_left_is_dropped_once_old() -> None:
    old = {
        "gone": f"{format_microtime(NOW - timedelta(seconds=1801))} submit/submit-jobs-gone",
        "young": f"{format_microtime(NOW - timedelta(seconds=60))} submit/submit-jobs-young",
        "a": f"{format_microtime(NOW - timedelta(seconds=5000))} blast/first-a",
    }
    record = {
        "metadata": {"name": "elb-gate-admissions", "resourceVersion": "4"},
        "data": {"reservations.json": "[]", "batch-work.json": json.dumps(old)},
    }
    api = FakeApi(jobs=[job("finalizer", "a").build()], lease_obj=alice_holds(), record=record)
    answer = await make(api).validate_job(admission("CREATE", job_object("submit", "d")))
    assert answer.outcome == "allowed", answer.response.message
    (written,) = api.written
    # "a" still has a Job listed (its finalizer runs): kept however old; "gone" is past
    # twice the Lease TTL with nothing left; "young" may still get its finalizer.
    assert sorted(json.loads(written["data"]["batch-work.json"])) == ["a", "d", "young"]


async def test_a_staging_reserved_by_another_search_refuses_a_second_one() -> None:
    reserved = entry("init-ssd-1-0", "setup", "job-1")
    reserved["stages"] = reserved["uses"] = ["core_nt"]
    api = FakeApi(lease_obj=alice_holds(), record=record_of(reserved))
    answer = await make(api).validate_job(admission("CREATE", init_ssd("job-2", 0, "core_nt")))
    assert (answer.outcome, answer.decision.reason) == ("denied", "db_staging")
    assert "which job-1 is staging already" in answer.response.message


# -- fail-closed ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failing", "error", "says"),
    [
        (
            "list",
            ApiUnavailable("GET /apis/batch/v1/...: no answer within 1.5s"),
            ("LIST search Jobs in namespace default", "no answer within 1.5s"),
        ),
        (
            "get",
            ApiError(500, "InternalError", "Internal error occurred: etcd"),
            ("GET Lease default/elb-blast-submit-default", "API answered 500 InternalError"),
        ),
        (
            "get",
            ApiError(403, "Forbidden", "leases is forbidden"),
            ("GET Lease default/elb-blast-submit-default", "403 Forbidden"),
        ),
    ],
    ids=["a LIST timeout", "a Lease GET 500", "a Lease GET refused by RBAC"],
)
async def test_a_failed_read_is_a_503_denial_never_an_admit(
    failing: str, error: Exception, says: tuple[str, ...]
) -> None:
    api = FakeApi(lease_obj=alice_holds(), fail={failing: error})
    handlers = make(api)
    response = (
        await handlers.validate_job(admission("CREATE", job_object("finalizer", "a")))
    ).response
    assert not response.allowed
    assert (response.code, response.reason) == (503, "ServiceUnavailable")
    assert "could not verify Gate A/B" in response.message and "fail-closed" in response.message
    for phrase in says:
        assert phrase in response.message
    verb = "list" if failing == "list" else "get"
    resource = "jobs" if failing == "list" else "leases"
    assert (
        sample(
            handlers, "elb_gate_api_errors_total", component="webhook", verb=verb, resource=resource
        )
        == 1
    )


async def test_in_warn_mode_an_unverified_request_is_admitted_with_a_warning() -> None:
    api = FakeApi(fail={"list": ApiUnavailable("down")})
    handlers = make(api, enforcement="warn")
    response = (
        await handlers.validate_job(admission("CREATE", job_object("finalizer", "a")))
    ).response
    # Warn mode never blocks (staged rollout), but it says so and counts the would-deny.
    assert response.allowed and any("could not verify" in w for w in response.warnings)
    assert (
        sample(
            handlers,
            "elb_gate_would_deny_total",
            webhook="search-admission.elb-gate.io",
            reason="unverified",
        )
        == 1
    )


# -- warn mode, dry run, metrics -------------------------------------------------------------


async def test_warn_mode_admits_with_the_denial_text_and_counts_it() -> None:
    api = FakeApi(jobs=[job("blast", i).build() for i in "abc"], lease_obj=alice_holds())
    handlers = make(api, enforcement="warn")
    answer = await handlers.validate_job(admission("CREATE", job_object("submit", "d")))
    response = answer.response
    assert response.allowed and (answer.outcome, answer.decision.reason) == ("warned", "ceiling")
    joined = " ".join(response.warnings)
    assert "Gate B: 3/3 searches" in joined and "Retry when one of a, b, c completes" in joined
    assert all(len(w) <= 120 for w in response.warnings)
    assert (
        sample(
            handlers,
            "elb_gate_would_deny_total",
            webhook="search-admission.elb-gate.io",
            reason="ceiling",
        )
        == 1
    )


async def test_warn_mode_never_relaxes_the_lease_guard() -> None:
    handlers = make(FakeApi(), enforcement="warn")
    live = lease(HOLDER, holder_user="alice", renewed_ago=10)
    new = lease("openapi-6a1c0e6b5f8f4b83a1d2c3e4f5a6b7c8", holder_user="bob")
    response = (
        await handlers.validate_lease(
            admission("UPDATE", new, live, who=user("bob"), resource="leases")
        )
    ).response
    assert not response.allowed and response.code == 409 and response.reason == "Conflict"


async def test_a_dry_run_gets_the_same_decision() -> None:
    api = FakeApi(jobs=[job("blast", i).build() for i in "abc"], lease_obj=alice_holds())
    handlers = make(api)
    real = (await handlers.validate_job(admission("CREATE", job_object("submit", "d")))).response
    dry = (
        await handlers.validate_job(admission("CREATE", job_object("submit", "d"), dry_run=True))
    ).response
    assert (dry.allowed, dry.code, dry.message) == (real.allowed, real.code, real.message)


async def test_each_judged_search_job_exports_the_census_it_was_judged_on() -> None:
    api = FakeApi(jobs=[job("blast", "a").build()], lease_obj=alice_holds())
    handlers = make(api)
    first = await handlers.validate_job(admission("CREATE", job_object("submit", "d")))
    second = await handlers.validate_job(
        admission("CREATE", job_object("submit", "e"), who=user("bob"))
    )
    assert [(a.outcome, a.decision.reason) for a in (first, second)] == [
        ("allowed", "ok"),
        ("denied", "not_holder"),
    ]
    # The second was judged on a and on d, which the first admitted (the record holds it).
    assert sample(handlers, "elb_gate_active_searches", namespace="default") == 2
    assert sample(handlers, "elb_gate_search_ceiling", namespace="default") == 3


async def test_the_census_metric_reports_the_ceiling_the_nodes_lower_it_to() -> None:
    # Three blast-pool nodes of 15.7 CPU hold two searches of 6-CPU pods: the webhook
    # exports the effective ceiling it judged against (2), not the configured one (3),
    # for an admitted Job and for one the DB staging rule refuses after the capacity rule.
    staging = init_ssd("job-1", 0, "core_nt")
    api = FakeApi(jobs=[staging], lease_obj=alice_holds())
    handlers = make(
        api, capacity="deny", capacity_pool_selector=POOL, capacity_pod_cpu="6", db_staging="deny"
    )
    handlers.nodes = lambda: NodesSeen(AKS)
    refused = await handlers.validate_job(admission("CREATE", init_ssd("job-2", 0, "core_nt")))
    assert (refused.outcome, refused.decision.reason) == ("denied", "db_staging")
    assert sample(handlers, "elb_gate_search_ceiling", namespace="default") == 2
    handlers.metrics.record_census("default", 0, 3)  # so the next sample is the next Job's
    admitted = await handlers.validate_job(admission("CREATE", init_ssd("job-3", 0, "other_db")))
    assert admitted.outcome == "allowed", admitted.response.message
    assert sample(handlers, "elb_gate_search_ceiling", namespace="default") == 2


# -- the applications ------------------------------------------------------------------------


@pytest.fixture
def runtime(tmp_path: Any) -> Runtime:
    api = FakeApi(lease_obj=alice_holds())
    handlers = make(api)
    certificate = ServingCertificate(str(tmp_path / "missing.crt"), str(tmp_path / "missing.key"))
    return Runtime(handlers, certificate, ApiReachability(api, 1.0))  # type: ignore[arg-type]


async def test_metrics_are_served_in_prometheus_text(aiohttp_client: Any, runtime: Runtime) -> None:
    app: TestClient = await aiohttp_client(create_app(runtime))
    ops: TestClient = await aiohttp_client(create_ops_app(runtime))
    sent = review(admission("CREATE", job_object("finalizer", "a")))
    assert (await app.post("/validate/jobs", json=sent)).status == 200
    resp = await ops.get("/metrics")
    text = await resp.text()
    assert resp.status == 200
    assert 'elb_gate_admission_requests_total{decision="allowed"' in text
    assert "elb_gate_certificate_expiry_timestamp_seconds" in text


async def test_not_ready_until_the_certificate_is_loaded(
    aiohttp_client: Any, runtime: Runtime
) -> None:
    ops: TestClient = await aiohttp_client(create_ops_app(runtime))
    resp = await ops.get("/readyz")
    body = await resp.json()
    assert resp.status == 503 and "serving certificate not loaded" in body["problems"][0]
    assert (await ops.get("/healthz")).status == 200


async def test_admission_paths_are_served_and_the_app_owns_the_api_session(
    aiohttp_client: Any, runtime: Runtime
) -> None:
    app: TestClient = await aiohttp_client(create_app(runtime))
    assert runtime.admission.api.opened  # type: ignore[attr-defined]
    for path in ("/validate/jobs", "/mutate/leases", "/validate/leases"):
        resp = await app.post(path, json={"kind": "AdmissionReview"})
        assert resp.status == 400, path
    await app.close()
    assert runtime.admission.api.closed  # type: ignore[attr-defined]


async def test_a_policy_that_raises_is_left_to_the_http_layer_which_counts_it_errored(
    aiohttp_client: Any, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook import lease_guard

    def broken(*_args: Any, **_kw: Any) -> Any:
        raise KeyError("spec")

    monkeypatch.setattr(lease_guard, "decide", broken)
    submit = lease(HOLDER, holder_user="alice")
    request_ = admission("UPDATE", submit, submit, resource="leases")
    with pytest.raises(KeyError):
        await runtime.admission.validate_lease(request_)
    app: TestClient = await aiohttp_client(create_app(runtime))
    resp = await app.post("/validate/leases", json=review(request_))
    answer = (await resp.json())["response"]
    assert resp.status == 200 and not answer["allowed"] and answer["status"]["code"] == 500
    guard = "lease-guard.elb-gate.io"
    assert (
        sample(
            runtime.admission,
            "elb_gate_admission_requests_total",
            webhook=guard,
            operation="UPDATE",
            decision="errored",
            reason="internal",
        )
        == 1
    )
    assert sample(runtime.admission, "elb_gate_admission_in_flight", webhook=guard) == 0


def wired(api: FakeApi, tmp_path: Any) -> Runtime:
    """Admission and readiness wired as webhook/server.py wires them."""
    reach = ApiReachability(api, 1.0)  # type: ignore[arg-type]
    chosen = Settings.of()
    handlers = Admission(
        chosen.gate,
        chosen.webhook,
        chosen.rules,
        api,  # type: ignore[arg-type]
        WebhookMetrics(CollectorRegistry()),
        clock=lambda: NOW,
        on_api_answer=reach.note_answer,
        on_api_unavailable=reach.note_unavailable,
    )
    certificate = ServingCertificate(str(tmp_path / "missing.crt"), str(tmp_path / "missing.key"))
    return Runtime(handlers, certificate, reach)


async def problems(ops: TestClient) -> list[str]:
    return list((await (await ops.get("/readyz")).json()).get("problems") or [])


READS = ("list", "get", "record", "job")


async def test_an_api_that_stops_answering_makes_readiness_fail_at_the_next_probe(
    aiohttp_client: Any, tmp_path: Any
) -> None:
    """Not FRESH_SECONDS after the last answer: the first admission read that gets no
    answer sends the next /readyz to the API itself, which does not answer either."""
    api = FakeApi(lease_obj=alice_holds())
    runtime = wired(api, tmp_path)
    app: TestClient = await aiohttp_client(create_app(runtime))
    ops: TestClient = await aiohttp_client(create_ops_app(runtime))
    sent = review(admission("CREATE", job_object("finalizer", "a")))
    assert (await app.post("/validate/jobs", json=sent)).status == 200
    assert not [p for p in await problems(ops) if "API server unreachable" in p]
    cut = ApiUnavailable("Cannot connect to host 10.96.0.1:443 [Connect call failed]")
    api.fail = dict.fromkeys((*READS, "probe"), cut)
    body = await (await app.post("/validate/jobs", json=sent)).json()
    assert body["response"]["allowed"] is False and body["response"]["status"]["code"] == 503
    assert [p for p in await problems(ops) if "API server unreachable" in p] == [
        f"API server unreachable: {cut}"
    ]


async def test_a_lone_failed_read_while_the_api_answers_leaves_the_replica_ready(
    aiohttp_client: Any, tmp_path: Any
) -> None:
    api = FakeApi(lease_obj=alice_holds())
    runtime = wired(api, tmp_path)
    app: TestClient = await aiohttp_client(create_app(runtime))
    ops: TestClient = await aiohttp_client(create_ops_app(runtime))
    api.fail = dict.fromkeys(READS, ApiUnavailable("no answer within 1.5s"))
    sent = review(admission("CREATE", job_object("finalizer", "a")))
    body = await (await app.post("/validate/jobs", json=sent)).json()
    assert body["response"]["allowed"] is False
    probes = len([c for c in api.calls if c[0] == "probe"])
    assert not [p for p in await problems(ops) if "API server unreachable" in p]
    assert len([c for c in api.calls if c[0] == "probe"]) == probes + 1  # it asked the API
