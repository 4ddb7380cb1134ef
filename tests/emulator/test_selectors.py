"""Label and field selectors, parsed and matched as the apiserver does."""

from __future__ import annotations

import pytest

from tests.emulator.rest import call
from tests.kube_emulator import ApiError, Emulator
from tests.kube_emulator.selectors import label_selector_matcher, parse_label_selector

LABELS = {"app": "blast", "elb-job-id": "j1", "tier": "2"}


@pytest.mark.parametrize("selector,expected", [
    ("", True),
    ("app=blast", True),
    ("app==blast", True),
    ("app!=blast", False),
    ("app!=finalizer", True),
    ("missing!=x", True),
    ("app in (finalizer,blast,submit)", True),
    ("app in (finalizer, submit)", False),
    ("app notin (finalizer,submit)", True),
    ("missing notin (a)", True),
    ("elb-job-id", True),
    ("!elb-job-id", False),
    ("!missing", True),
    ("app=blast,elb-job-id=j1", True),
    ("app in (blast),elb-job-id notin (j1)", False),
    ("tier>1", True),
    ("tier<2", False),
])
def test_label_selector_strings(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector)(LABELS) is expected


def test_a_malformed_label_selector_is_a_400() -> None:
    with pytest.raises(ApiError) as exc:
        parse_label_selector("app in blast")
    assert exc.value.code == 400


def test_label_selector_objects_combine_match_labels_and_expressions() -> None:
    selector = {"matchLabels": {"app": "blast"},
                "matchExpressions": [{"key": "elb-job-id", "operator": "Exists"},
                                     {"key": "tier", "operator": "NotIn", "values": ["1"]}]}
    assert label_selector_matcher(selector)(LABELS)
    assert not label_selector_matcher(selector)({"app": "blast"})
    assert label_selector_matcher({})({})


def _job(emu: Emulator, name: str, app: str, succeeded: int | None) -> None:
    status = {} if succeeded is None else {"succeeded": succeeded}
    emu.create({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": "sel", "labels": {"app": app}},
                "spec": {"template": {}}, "status": status})


@pytest.fixture(scope="module")
def jobs(emu: Emulator) -> Emulator:
    emu.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sel"}})
    _job(emu, "absent", "blast", None)
    _job(emu, "zero", "finalizer", 0)
    _job(emu, "done", "finalizer", 1)
    _job(emu, "other", "web", 3)
    return emu


def _names(emu: Emulator, query: str, path: str = "/apis/batch/v1/namespaces/sel/jobs") -> list:
    reply = call(emu, "GET", f"{path}?{query}")
    assert reply.status == 200, reply.body
    return sorted(item["metadata"]["name"] for item in reply.body["items"])


def test_status_successful_0_matches_jobs_with_absent_or_zero_succeeded(jobs: Emulator) -> None:
    assert _names(jobs, "fieldSelector=status.successful=0") == ["absent", "zero"]
    assert _names(jobs, "fieldSelector=status.successful!=0") == ["done", "other"]


def test_field_and_label_selectors_combine(jobs: Emulator) -> None:
    query = "labelSelector=app+in+(finalizer,blast)&fieldSelector=status.successful%3D0"
    assert _names(jobs, query) == ["absent", "zero"]
    assert _names(jobs, "fieldSelector=metadata.name==done") == ["done"]
    assert _names(jobs, "fieldSelector=metadata.namespace=sel,metadata.name!=done") == [
        "absent", "other", "zero"]


def test_cluster_wide_list_spans_namespaces(jobs: Emulator) -> None:
    assert _names(jobs, "labelSelector=app%3Dfinalizer", "/apis/batch/v1/jobs") == [
        "done", "zero"]


def test_an_unsupported_field_label_is_a_400(jobs: Emulator) -> None:
    reply = call(jobs, "GET", "/apis/batch/v1/namespaces/sel/jobs?fieldSelector=spec.x%3D1")
    assert reply.status == 400
    assert reply.body["message"] == "field label not supported: spec.x"


def test_limit_and_continue_page_through_a_list(jobs: Emulator) -> None:
    path = "/apis/batch/v1/namespaces/sel/jobs"
    first = call(jobs, "GET", f"{path}?limit=3").body
    assert len(first["items"]) == 3 and first["metadata"]["remainingItemCount"] == 1
    token = first["metadata"]["continue"]
    rest = call(jobs, "GET", f"{path}?limit=3&continue={token}").body
    assert [i["metadata"]["name"] for i in rest["items"]] == ["zero"]
    assert "continue" not in rest["metadata"]


def test_a_continue_token_older_than_the_history_is_410(emu: Emulator) -> None:
    emu.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}})
    emu.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c2"}})
    path = "/api/v1/namespaces/default/configmaps"
    token = call(emu, "GET", f"{path}?limit=1").body["metadata"]["continue"]
    emu.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c3"}})
    emu.compact()
    reply = call(emu, "GET", f"{path}?limit=1&continue={token}")
    assert (reply.status, reply.body["reason"]) == (410, "Expired")


def test_helpers_accept_selectors(jobs: Emulator) -> None:
    found = jobs.list("jobs", "sel", label_selector="app=finalizer",
                      field_selector="status.successful=0")
    assert [j["metadata"]["name"] for j in found] == ["zero"]
