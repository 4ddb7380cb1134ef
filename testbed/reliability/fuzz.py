"""``make fuzz``: coverage-guided fuzzing of the webhook's request decoding and decisions.

    python -m testbed.reliability.fuzz --seconds 600          # atheris (libFuzzer)
    python -m testbed.reliability.fuzz --runs 200000

In process, no I/O: bytes -> JSON -> ``AdmissionRequest.from_review`` (a
``MalformedReview`` is the HTTP layer's 400) -> search admission (``decide`` on the
census of a fixed namespace where alice holds the Lease), the Lease guard and the
Lease stamp -> the AdmissionReview the endpoint would write. Any exception other than
``MalformedReview`` is a crash, and so is ``allowed: true`` for a Job that opens or
finalizes a search requested by anyone but alice. At the end it prints what it covered:
libFuzzer's ``cov``/``ft`` counters (edges / features) and the distinct decisions reached.
Needs atheris (``make fuzz`` installs it first).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testbed.reliability.review_strategies import (
    CONTROLLER_USER,
    FREE_NS,
    GATED_NS,
    HOLDER_USER,
    live_lease,
    opens_or_finalizes_search,
    username,
)

REACHED: Counter[str] = Counter()
SEEDS: tuple[dict[str, Any], ...] = (
    {"operation": "CREATE", "namespace": GATED_NS, "userInfo": {"username": "bob"},
     "object": {"metadata": {"name": "f", "labels": {"app": "finalizer", "elb-job-id": "s1"}}}},
    {"operation": "UPDATE", "namespace": GATED_NS, "userInfo": {"username": HOLDER_USER},
     "object": {"metadata": {"labels": {"app": "blast", "elb-job-id": "s2"}}},
     "oldObject": {"metadata": {"labels": {"app": "other"}}}},
    {"operation": "UPDATE", "namespace": GATED_NS, "name": f"elb-blast-submit-{GATED_NS}",
     "userInfo": {"username": "bob", "extra": {"authentication.kubernetes.io/pod-name": ["p"]}},
     "object": live_lease(), "oldObject": live_lease()},
    {"operation": "DELETE", "namespace": FREE_NS, "name": f"elb-blast-submit-{FREE_NS}",
     "userInfo": {"username": CONTROLLER_USER},
     "oldObject": live_lease()},
)  # fmt: skip


def make_target() -> Callable[[bytes], None]:
    """The function under test (imports happen here, so atheris can instrument them)."""
    import orjson

    from elbgate.census import census
    from elbgate.settings import Settings
    from webhook import lease_guard, lease_stamp, search_admission
    from webhook.lease_request import LeaseRequest
    from webhook.review import AdmissionRequest, MalformedReview

    settings = Settings.from_env({"BLAST_MAX_RUN_CONCURRENCY": "2"})
    now = datetime.now(UTC)
    lease = live_lease(now)
    active = census(
        [{"metadata": {"name": "running", "labels": {"app": "blast", "elb-job-id": "active-1"}}}],
        now,
        settings.gate.finalizer_grace_seconds,
    )

    def target(data: bytes) -> None:
        try:
            review = orjson.loads(data)
        except orjson.JSONDecodeError:
            REACHED["400 not JSON"] += 1
            return
        try:
            request = AdmissionRequest.from_review(review)
        except MalformedReview:
            REACHED["400 not a review"] += 1
            return
        job = search_admission.JobRequest.from_admission(request)
        reads = search_admission.reads_needed(job)
        observed = search_admission.Observed(
            active if reads is not search_admission.Reads.NONE else None,
            lease if request.namespace == GATED_NS else None,
        )
        decision = search_admission.decide(job, observed, settings.gate, settings.rules, now)
        REACHED[f"job {decision.allowed} {decision.reason}"] += 1
        raw = review["request"]
        if decision.allowed and opens_or_finalizes_search(raw) and username(raw) != HOLDER_USER:
            joins = raw["object"]["metadata"]["labels"].get("elb-job-id") == "active-1"
            if not (joins and raw["object"]["metadata"]["labels"].get("app") != "finalizer"):
                raise AssertionError(f"gated Job admitted without proof: {raw!r}")
        orjson.dumps(decision.response().complete(request.uid).to_review())
        lease_request = LeaseRequest.from_admission(request)
        guard = lease_guard.decide(lease_request, settings.gate, settings.webhook, now)
        stamp = lease_stamp.decide(lease_request, now)
        REACHED[f"guard {guard.allowed} {guard.reason}"] += 1
        REACHED[f"stamp {stamp.reason}"] += 1
        orjson.dumps(guard.response().complete(request.uid).to_review())
        orjson.dumps(stamp.response().complete(request.uid).to_review())

    return target


def corpus_dir(given: Path | None) -> Path:
    directory = given or Path(tempfile.mkdtemp(prefix="elb-gate-fuzz-"))
    directory.mkdir(parents=True, exist_ok=True)
    for i, request in enumerate(SEEDS):
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": f"seed-{i}", **request}}  # fmt: skip
        (directory / f"seed-{i}.json").write_bytes(json.dumps(review).encode())
    return directory


def run_atheris(args: argparse.Namespace) -> None:
    import atheris  # not among the requirements: `make fuzz` installs it

    with atheris.instrument_imports(include=["webhook", "elbgate"]):
        target = make_target()
    corpus = corpus_dir(args.corpus)
    flags = [sys.argv[0], str(corpus), "-print_final_stats=1", f"-max_total_time={args.seconds}"]
    if args.runs:
        flags.append(f"-runs={args.runs}")
    print(f"atheris: fuzzing for {args.seconds}s (corpus {corpus})", flush=True)
    # libFuzzer ends the process itself (no exit hooks run): report just before it does.
    report_at = time.monotonic() + max(0.0, args.seconds - 1.0)
    runs = [0]

    def reporting_target(data: bytes) -> None:
        runs[0] += 1
        if time.monotonic() >= report_at or runs[0] == args.runs:
            report()
        target(data)

    atheris.Setup(flags, reporting_target)
    try:
        atheris.Fuzz()
    except SystemExit:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.reliability.fuzz", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=int, default=60, help="how long to fuzz (default 60)")
    parser.add_argument("--runs", type=int, default=0, help="stop after RUNS inputs (0: no limit)")
    parser.add_argument("--corpus", type=Path, help="corpus directory (kept between runs)")
    args = parser.parse_args(argv)
    run_atheris(args)
    report()
    return 0


@functools.cache
def report() -> None:
    """Print the distinct decisions reached (once)."""
    print(f"distinct decisions reached: {len(REACHED)}", flush=True)
    for outcome, n in sorted(REACHED.items()):
        print(f"  {n:>9}  {outcome}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
