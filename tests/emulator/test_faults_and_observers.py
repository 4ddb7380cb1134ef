"""Fault injection on the HTTP layer, and write observers for invariant checks."""

from __future__ import annotations

import http.client
import urllib.error

import pytest

from tests.emulator.rest import call
from tests.kube_emulator import Emulator

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def test_an_injected_500_fires_count_times_with_a_status_body(emulator: Emulator) -> None:
    fault = emulator.faults.add(method="GET", resource="leases", status=500, count=1)
    first = call(emulator, "GET", f"{LEASES}/x")
    second = call(emulator, "GET", f"{LEASES}/x")
    assert (first.status, first.body["kind"], first.body["reason"]) == (
        500, "Status", "InternalError")
    assert second.status == 404
    assert fault.hits == 1


def test_an_injected_429_says_when_to_retry(emulator: Emulator) -> None:
    emulator.faults.add(method=None, resource="leases", status=429)
    reply = call(emulator, "POST", LEASES, {"metadata": {"name": "x"}})
    assert reply.status == 429 and reply.headers["Retry-After"] == "1"
    assert reply.body["reason"] == "TooManyRequests"


def test_a_fault_matches_namespace_and_name_and_lasts_until_removed(
        emulator: Emulator) -> None:
    fault = emulator.faults.add(method="GET", resource="leases", namespace="default",
                                name="target", status=503, count=None)
    assert [call(emulator, "GET", f"{LEASES}/target").status for _ in range(3)] == [503] * 3
    assert call(emulator, "GET", f"{LEASES}/other").status == 404
    fault.remove()
    assert call(emulator, "GET", f"{LEASES}/target").status == 404
    assert fault.hits == 3


def test_a_delay_only_fault_passes_the_request_through(emulator: Emulator) -> None:
    fault = emulator.faults.add(method="GET", status=None, delay=0.01)
    assert call(emulator, "GET", f"{LEASES}/x").status == 404
    assert fault.hits == 1


def test_a_dropped_connection_reaches_the_client_as_a_network_error(
        emulator: Emulator) -> None:
    emulator.faults.add(method="GET", resource="leases", drop=True)
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        call(emulator, "GET", f"{LEASES}/x")
    assert call(emulator, "GET", f"{LEASES}/x").status == 404


def test_watch_faults_only_hit_watch_requests(emulator: Emulator) -> None:
    emulator.faults.add(method="GET", resource="leases", status=500, watch=True, count=None)
    assert call(emulator, "GET", LEASES).status == 200
    assert call(emulator, "GET", f"{LEASES}?watch=true&timeoutSeconds=1").status == 500
    emulator.faults.clear()
    assert call(emulator, "GET", f"{LEASES}?watch=true&timeoutSeconds=1").status == 200


def test_observers_see_every_committed_write_in_order(emulator: Emulator) -> None:
    seen: list[tuple[str, str, str, str]] = []
    unsubscribe = emulator.subscribe(lambda kind, resource, obj: seen.append(
        (kind, resource, obj["metadata"]["name"], obj["metadata"]["resourceVersion"])))
    call(emulator, "POST", LEASES, {"metadata": {"name": "a"}})
    call(emulator, "PATCH", f"{LEASES}/a", {"spec": {"holderIdentity": "h"}},
         content_type="application/merge-patch+json")
    call(emulator, "POST", LEASES, {"metadata": {"name": "a"}})  # AlreadyExists: no write
    emulator.delete("leases", "default", "a")
    unsubscribe()
    emulator.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "quiet"}})
    assert [s[:3] for s in seen] == [("ADDED", "leases", "a"), ("MODIFIED", "leases", "a"),
                                     ("DELETED", "leases", "a")]
    rvs = [int(s[3]) for s in seen]
    assert rvs == sorted(rvs)
