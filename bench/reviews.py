"""The AdmissionReview bodies the benchmark sends, as the apiserver would send them."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from bench.namespace_jobs import api_body, job_status, planned_jobs, submit_lease
from elbgate.names import HOLDER_USER_ANNOTATION
from testbed import elastic_blast as elb

JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
NEW_SEARCH_ID = elb.search_id(0xBE7C4)
"""A search the namespace mix never holds (it has at most a few hundred)."""
STARTED = datetime(2026, 1, 5, 10, 0, 0, tzinfo=UTC)


def _user(username: str) -> dict[str, Any]:
    return {"username": username, "groups": ["system:authenticated"]}


def review(
    operation: str,
    resource: tuple[str, str, str],
    kind: str,
    namespace: str,
    name: str,
    user: dict[str, Any],
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
) -> bytes:
    """An AdmissionReview v1 request body (``resource`` = group, version, plural)."""
    group, version, plural = resource
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}.get(
        operation, "DeleteOptions"
    )
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": user,
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"},
    }
    return orjson.dumps(
        {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
    )


def _stored(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    """``obj`` as the apiserver holds it once created (uid, timestamp, resourceVersion)."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta.update(uid=str(uuid.uuid4()), creationTimestamp="2026-01-05T10:00:00Z", resourceVersion=rv)
    return obj


JOBS = ("batch", "v1", "jobs")
LEASES = ("coordination.k8s.io", "v1", "leases")


def new_search_finalizer(namespace: str, username: str) -> bytes:
    """CREATE of ElasticBLAST's finalizer Job for a search not yet active, by the Lease
    holder: the full Gate A + Gate B path (census LIST and Lease GET, concurrently)."""
    job = elb.for_api(elb.finalizer(NEW_SEARCH_ID), namespace)
    job["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp="2026-01-05T10:00:00Z")
    job["status"] = {}
    name = job["metadata"]["name"]
    return review("CREATE", JOBS, "Job", namespace, name, _user(username), job)


def job_controller_update(namespace: str) -> bytes:
    """UPDATE of a running blast Job's status by the Job controller: adds no gated
    label, so it is admitted at once with no API call (the fast path)."""
    running = next(j for j in planned_jobs(30) if j.state == "running" and j.app == "blast")
    old = _stored(api_body(running, namespace), "41")
    old["status"] = job_status("running", STARTED, STARTED)
    new = copy.deepcopy(old)
    new["status"] = job_status("succeeded", STARTED, STARTED)
    name = old["metadata"]["name"]
    return review("UPDATE", JOBS, "Job", namespace, name, _user(JOB_CONTROLLER), new, old)


def other_lease_update(namespace: str) -> bytes:
    """A renew of a Lease that is not ``elb-blast-submit-*`` (the fast path for Leases)."""
    lease = submit_lease(namespace, "someone", STARTED)
    lease["metadata"]["name"] = "elb-gate-controller"
    old = _stored(lease, "77")
    return review(
        "UPDATE", LEASES, "Lease", namespace, "elb-gate-controller", _user("ctrl"), old, old
    )


def submit_lease_renew(namespace: str, username: str, now: datetime, stamped: bool) -> bytes:
    """The holder renews the Gate A Lease with a full-object PUT, as the raw-HTTP
    client does. ``stamped`` False: the body the mutating stamp sees (annotations
    dropped by the PUT); True: the body the validating guard sees after stamping."""
    old = _stored(submit_lease(namespace, username, now), "88")
    new = copy.deepcopy(old)
    if not stamped:
        new["metadata"].pop("annotations")
    else:
        new["metadata"]["annotations"] = {HOLDER_USER_ANNOTATION: username}
    name = old["metadata"]["name"]
    return review("UPDATE", LEASES, "Lease", namespace, name, _user(username), new, old)
