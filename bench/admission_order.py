"""What ordering admissions through the admission record costs (docs/design.md,
"Admission is linearizable"): a search's first Job, and a Job of a search already active.

``python -m bench.admission_order`` (and a phase of ``make bench``). The real webhook
process, its API calls counted by a :class:`testbed.faultproxy.FaultProxy` in front of
the API server (no faults: it only forwards and records), judging AdmissionReviews POSTed
straight to it one at a time over one keep-alive TLS connection, in a gated namespace
where the holder holds the Lease and one search runs:

* ``opening``: the CREATE of a new search's ``submit-jobs`` Job by the holder, a new
  ``elb-job-id`` and name each time; once admitted, the Job is stored and the one
  before it deleted (:class:`Namespace`), so each review finds the one before listed,
  as in a namespace that opens one search at a time: the full path, every one admitted;
* ``joining``: the CREATE of a ``blast`` Job of the running search by the in-cluster
  submit Job's ServiceAccount (its batch work), stored the same way, which adds nothing
  to the record.

Per kind: the client's round trip (p50, p99) and the webhook's API requests per review,
by resource. Run on a commit before the record to get the figures without it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp

from bench import reviews
from bench.api_counts import classify, on_own_clock
from bench.namespace_jobs import submit_lease
from bench.stats import percentile
from testbed import elastic_blast as elb
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.install import Installation
from testbed.webhook_process import WebhookProcess

HOLDER_USER = "bench-holder"
IN_CLUSTER_USER = "system:serviceaccount:bench:default"
RUNNING = f"job-{'0' * 24}0bench001"
POD = "elb-gate-webhook-order"
QUICK_REQUESTS = 40
DEFAULT_REQUESTS = 400
WARMUP = 10


def _review(namespace: str, job: dict[str, Any], username: str) -> tuple[bytes, dict[str, Any]]:
    """The AdmissionReview of ``job``'s CREATE by ``username``, and the Job as sent."""
    sent = elb.for_api(job, namespace)
    obj = dict(sent, status={})
    obj["metadata"] = dict(sent["metadata"], uid=str(uuid.uuid4()))
    user = {"username": username, "groups": ["system:authenticated"]}
    name = obj["metadata"]["name"]
    return reviews.review("CREATE", reviews.JOBS, "Job", namespace, name, user, obj), sent


def opening(namespace: str, i: int) -> tuple[bytes, dict[str, Any]]:
    """Search ``i``'s first Job (a new id and Job name each time)."""
    job = elb.submit_jobs(f"job-{uuid.uuid4().hex}")
    job["metadata"]["name"] = f"submit-jobs-bench-{i}"
    return _review(namespace, job, HOLDER_USER)


def joining(namespace: str, i: int) -> tuple[bytes, dict[str, Any]]:
    """A batch Job of the running search, as the in-cluster submit Job creates it."""
    job = elb.blast_batch(RUNNING, 1, "16S_ribosomal_RNA")
    job["metadata"]["name"] = f"blastn-batch-bench-{i}"
    return _review(namespace, job, IN_CLUSTER_USER)


class Namespace:
    """What happens to an admitted Job between two reviews: it is stored (and so listed
    by the next review), and the one before it ends (deleted), so the namespace holds
    the same few Jobs all along (as one that opens one search at a time)."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.cp, self.namespace = cp, namespace
        self.previous: str | None = None

    def stored(self, job: dict[str, Any]) -> None:
        self.cp.admin.create(job)
        if self.previous is not None:
            self.cp.admin.delete("jobs", self.namespace, self.previous)
        self.previous = job["metadata"]["name"]


async def _measure(
    hook: WebhookProcess,
    proxy: FaultProxy,
    make: Callable[[int], tuple[bytes, dict[str, Any]]],
    after: Callable[[dict[str, Any]], None],
    requests: int,
) -> dict[str, Any]:
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    calls: list[tuple[str, str]] = []
    connector = aiohttp.TCPConnector(ssl=hook.client_context(), limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for i in range(WARMUP + requests):
            body, job = make(i)
            calls_before = len(proxy.requests)
            started = time.perf_counter()
            async with session.post(
                f"{hook.url}/validate/jobs",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as resp:
                answer = json.loads(await resp.read())
            elapsed = time.perf_counter() - started
            allowed = bool((answer.get("response") or {}).get("allowed"))
            if i >= WARMUP:
                calls.extend(proxy.requests[calls_before:])
                latencies.append(elapsed * 1000)
                outcomes["allowed" if allowed else "denied"] += 1
            if allowed:
                await asyncio.to_thread(after, job)
    # The readiness key is renewed on the replica's own clock (every few seconds per
    # gated namespace), not per review: a renewal that falls inside a review's window is
    # counted apart, so the per-review figures say what admission itself costs.
    per_review = [c for c in calls if not on_own_clock(*c)]
    background = len(calls) - len(per_review)
    by: Counter[str] = Counter()
    for method, path_qs in per_review:
        _kind, resource = classify(method, path_qs)
        by[f"{method} {resource}"] += 1
    return {
        "requests": requests,
        "outcomes": dict(outcomes),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "api_requests_per_review": len(per_review) / requests,
        "api_requests_by_call": {k: v / requests for k, v in sorted(by.items())},
        "readiness_key_requests": background,
    }


def _bound(
    make: Callable[[str, int], tuple[bytes, dict[str, Any]]], namespace: str
) -> Callable[[int], tuple[bytes, dict[str, Any]]]:
    return lambda i: make(namespace, i)


def run(
    cp: ControlPlane | None = None,
    requests: int = DEFAULT_REQUESTS,
    progress: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Measure both kinds; ``cp`` as :func:`bench.reclaim_latency.run`."""
    owned = cp is None
    cp = cp or ControlPlane.for_session()
    try:
        with FaultProxy(cp) as proxy:
            token = Installation.on(cp).identity("webhook", POD).token
            hook = WebhookProcess(
                cp, register=False, pod=POD, kubeconfig=proxy.kubeconfig(token, POD)
            )
            with hook:
                namespace = hook.install.gate(cp.new_namespace("bench-order"))
                cp.admin.create(
                    elb.for_api(elb.blast_batch(RUNNING, 0, "16S_ribosomal_RNA"), namespace)
                )
                cp.admin.apply(submit_lease(namespace, HOLDER_USER, datetime.now(UTC)))
                out: dict[str, Any] = {}
                for kind, make in (("opening", opening), ("joining", joining)):
                    progress(f"admission order: {requests} reviews, {kind}")
                    after = Namespace(cp, namespace).stored
                    out[kind] = asyncio.run(
                        _measure(hook, proxy, _bound(make, namespace), after, requests)
                    )
                cp.admin.delete("namespaces", None, namespace)
                return out
    finally:
        if owned:
            cp.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission_order", description=__doc__)
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REQUESTS} requests")
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(f"[order {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    result = run(None, QUICK_REQUESTS if args.quick else args.requests, progress)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
