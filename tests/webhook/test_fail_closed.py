"""Fail-closed: when the API cannot answer what a decision needs, the answer is 503, never an admit."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl
from tests.webhook.conftest import API_TIMEOUT_SECONDS
from tests.webhook.lease_clients import RawHttpLeaseClient
from tests.webhook.shapes import finalizer_job, new_job_id, search_job

pytestmark = pytest.mark.kubectl

DENIED = 'admission webhook "search-admission.elb-gate.io" denied the request: '
HANG = API_TIMEOUT_SECONDS + 1.5
"""Past the webhook's per-call deadline, inside the configuration's timeoutSeconds (5)."""


def fault_for(ns: str, read: str, how: str) -> dict[str, Any]:
    target: dict[str, Any] = (
        {"resource": "jobs", "namespace": ns}
        if read == "census"
        else {"resource": "leases", "namespace": ns, "name": f"elb-blast-submit-{ns}"}
    )
    behaviour = {
        "500": {"status": 500},
        "hang": {"status": None, "delay": HANG},
        "reset": {"status": None, "drop": True},
    }[how]
    return {"method": "GET", "count": None, **target, **behaviour}


@pytest.mark.parametrize("how", ["500", "hang", "reset"])
@pytest.mark.parametrize("read", ["census", "lease"])
def test_a_failing_read_denies_with_503_and_says_what_could_not_be_verified(
    emu: Emulator, ns: str, read: str, how: str
) -> None:
    assert RawHttpLeaseClient(emu, "alice", ns, "openapi-" + "a" * 32).acquire() == "acquired"
    job = finalizer_job(ns, new_job_id())
    fault = emu.faults.add(**fault_for(ns, read, how))
    try:
        result = kubectl(emu, "alice", "create", "-f", "-", input=json.dumps(job))
    finally:
        fault.remove()
    assert result.returncode == 1
    stderr = result.stderr.strip()
    assert stderr.startswith("Error from server (ServiceUnavailable)"), stderr
    assert DENIED + "elb-gate could not verify Gate A/B" in stderr
    what = (
        f"LIST search Jobs in namespace {ns}"
        if read == "census"
        else f"GET Lease {ns}/elb-blast-submit-{ns}"
    )
    assert what in stderr
    if how == "hang":
        assert f"no answer within {API_TIMEOUT_SECONDS:g}s" in stderr
    assert "fail-closed" in stderr
    assert emu.find("jobs", ns, job["metadata"]["name"]) is None
    # Once the API answers again, the same request is admitted.
    retry = kubectl(emu, "alice", "create", "-f", "-", input=json.dumps(job))
    assert retry.returncode == 0, retry.stderr


def test_a_blast_job_of_a_new_search_fails_closed_when_the_lease_cannot_be_read(
    emu: Emulator, ns: str
) -> None:
    fault = emu.faults.add(**fault_for(ns, "lease", "500"))
    try:
        blast = search_job("blast", ns, new_job_id())
        result = kubectl(emu, "alice", "create", "-f", "-", input=json.dumps(blast))
    finally:
        fault.remove()
    assert result.returncode == 1
    assert "could not verify" in result.stderr and "API answered 500" in result.stderr


def merge_patch(emu: Emulator, user: str, path: str, patch: dict[str, Any]) -> int:
    """A PATCH straight to the API (no GET first, unlike kubectl); returns the HTTP status."""
    request = urllib.request.Request(
        emu.url + path, data=json.dumps(patch).encode(), method="PATCH"
    )
    request.add_header("Authorization", f"Bearer {emu.token(user)}")
    request.add_header("Content-Type", "application/merge-patch+json")
    context = ssl.create_default_context(cafile=emu.ca_file)
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_an_api_outage_never_affects_requests_that_need_no_read(emu: Emulator, ns: str) -> None:
    job = search_job("blast", ns, new_job_id())
    emu.create(job)
    # Every read the webhook could make fails; a Job controller-style write needs none.
    faults = [
        emu.faults.add(**fault_for(ns, "census", "500")),
        emu.faults.add(**fault_for(ns, "lease", "500")),
    ]
    try:
        path = f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}"
        status = merge_patch(emu, "bob", path, {"metadata": {"annotations": {"note": "ok"}}})
    finally:
        for fault in faults:
            fault.remove()
    assert status == 200
    assert all(fault.hits == 0 for fault in faults)
