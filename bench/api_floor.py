"""The bare API round trip, in its own process: what the webhook's reads cost with
no admission around them.

``python -m bench.api_floor --kubeconfig K --namespace NS --warmup W`` makes the
same reads as search admission of a finalizer — the census LIST and the Lease GET,
concurrently, through the same :class:`KubeApi` client and the same functions
(``elbgate.kube.reads``), in a runtime set up as the webhook's
(``elbgate.serving.runtime.tune_gc``). After ``W`` round trips it prints ``ready`` and
reads commands on stdin, answering each with one JSON line:

* ``step``: one round trip, timed in this process (``ns``, ``outcome``);
* ``plan C:N:W:S``: a closed loop of ``C`` concurrent round trips (``W`` warm-up,
  then ``N`` measured or ``S`` seconds): latencies, wall seconds, this process's CPU
  seconds, outcomes.

The benchmark (:class:`bench.child_processes.ApiFloorSteps`) takes these in turns
with requests to the servers it compares them with, so all of them see the same
seconds of the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import orjson

from bench.load import LoadPlan, Measured, closed_loop
from elbgate.kube.api import ApiError, ApiUnavailable, KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.kube.reads import get_submit_lease, list_unfinished_search_jobs
from elbgate.serving import runtime


async def round_trip(api: KubeApi, namespace: str) -> str:
    """The census LIST and the Lease GET, concurrently; their outcome."""
    try:
        jobs, lease = await asyncio.gather(
            list_unfinished_search_jobs(api, namespace, deadline=5.0),
            get_submit_lease(api, namespace, deadline=5.0),
        )
    except (ApiError, ApiUnavailable) as exc:
        return f"error:{exc.__class__.__name__}"
    return f"jobs={len(jobs)},lease={'yes' if lease else 'no'}"


async def measure(api: KubeApi, namespace: str, plan: LoadPlan) -> Measured:
    """One closed loop of concurrent LIST + GET round trips; CPU of this process."""

    async def call() -> str:
        return await round_trip(api, namespace)

    cpu: list[float] = []

    def stop(m: Measured) -> None:
        m.cpu_seconds["api_floor"] = time.process_time() - cpu[0]

    return await closed_loop(call, plan, lambda: cpu.append(time.process_time()), stop)


async def serve(api: KubeApi, namespace: str, warmup: int) -> None:
    """Warm up, say ``ready``, then answer the commands read on stdin until it closes."""
    for _ in range(warmup):
        await round_trip(api, namespace)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    while line := (await stdin.readline()).strip():
        if line.startswith(b"plan "):
            m = await measure(api, namespace, parse_plan(line[5:].decode()))
            out.write(orjson.dumps(as_json(m)) + b"\n")
        else:
            started = time.perf_counter_ns()
            outcome = await round_trip(api, namespace)
            elapsed = time.perf_counter_ns() - started
            out.write(orjson.dumps({"ns": elapsed, "outcome": outcome}) + b"\n")
        out.flush()


def parse_plan(spec: str) -> LoadPlan:
    """``CONCURRENCY:REQUESTS:WARMUP:MAX_SECONDS``."""
    c, n, w, s = spec.split(":")
    return LoadPlan(int(c), int(n), int(w), float(s))


def format_plan(plan: LoadPlan) -> str:
    return f"{plan.concurrency}:{plan.requests}:{plan.warmup}:{plan.max_seconds}"


def as_json(m: Measured) -> dict[str, object]:
    return {
        "latencies_ns": m.latencies_ns,
        "wall_seconds": m.wall_seconds,
        "cpu_seconds": m.cpu_seconds,
        "outcomes": dict(m.outcomes),
    }


def from_json(doc: dict[str, Any]) -> Measured:
    m = Measured(doc["latencies_ns"], doc["wall_seconds"])
    m.cpu_seconds.update(doc["cpu_seconds"])
    m.outcomes.update(doc["outcomes"])
    return m


async def main_async(args: argparse.Namespace) -> None:
    config = KubeConfig.load(args.kubeconfig)
    async with KubeApi(config, timeout=5.0, user_agent="elb-gate-bench") as api:
        await serve(api, args.namespace, args.warmup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api_floor")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    parser.add_argument("--warmup", type=int, default=0, help="round trips before 'ready'")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    runtime.tune_gc()  # as python -m webhook does before it serves
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
