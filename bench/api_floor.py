"""The bare API round trip, in its own process: what the webhook's reads cost with
no admission around them.

``python -m bench.api_floor --kubeconfig K --namespace NS ...`` runs the same
reads as search admission of a finalizer — the census LIST and the Lease GET,
concurrently, through the same :class:`KubeApi` client and the same functions
(``elbgate.kube.reads``) — in a closed loop, and prints one JSON object per
plan: latencies (ns), wall seconds, this process's CPU seconds, outcomes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import orjson

from bench.load import LoadPlan, Measured, closed_loop
from elbgate.kube.api import ApiError, ApiUnavailable, KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.kube.reads import get_submit_lease, list_unfinished_search_jobs


async def measure(api: KubeApi, namespace: str, plan: LoadPlan) -> Measured:
    """One closed loop of concurrent LIST + GET round trips; CPU of this process."""

    async def call() -> str:
        try:
            jobs, lease = await asyncio.gather(
                list_unfinished_search_jobs(api, namespace, deadline=5.0),
                get_submit_lease(api, namespace, deadline=5.0),
            )
        except (ApiError, ApiUnavailable) as exc:
            return f"error:{exc.__class__.__name__}"
        return f"jobs={len(jobs)},lease={'yes' if lease else 'no'}"

    cpu: list[float] = []

    def stop(m: Measured) -> None:
        m.cpu_seconds["api_floor"] = time.process_time() - cpu[0]

    return await closed_loop(call, plan, lambda: cpu.append(time.process_time()), stop)


async def main_async(args: argparse.Namespace) -> list[Measured]:
    config = KubeConfig.load(args.kubeconfig)
    out = []
    async with KubeApi(config, timeout=5.0, user_agent="elb-gate-bench") as api:
        for spec in args.plan:
            c, n, w, s = spec.split(":")
            plan = LoadPlan(int(c), int(n), int(w), float(s))
            out.append(await measure(api, args.namespace, plan))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api_floor")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    parser.add_argument(
        "--plan",
        action="append",
        required=True,
        help="CONCURRENCY:REQUESTS:WARMUP:MAX_SECONDS (repeatable, run in order)",
    )
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    for m in asyncio.run(main_async(args)):
        line = {
            "latencies_ns": m.latencies_ns,
            "wall_seconds": m.wall_seconds,
            "cpu_seconds": m.cpu_seconds,
            "outcomes": dict(m.outcomes),
        }
        sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
