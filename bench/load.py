"""The load generator: a closed loop of ``concurrency`` workers over keep-alive
connections, a warm-up phase, then a measured phase bounded by a request count
and a time limit. Latency of every measured request is taken with
``time.perf_counter_ns``."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import orjson


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """How hard and how long to push."""

    concurrency: int
    requests: int
    """Measured requests (the phase also ends at ``max_seconds``)."""
    warmup: int
    max_seconds: float


@dataclass
class Measured:
    """One measured phase."""

    latencies_ns: list[int] = field(default_factory=list)
    wall_seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    """CPU used during the measured phase by each process the caller watched."""

    @property
    def count(self) -> int:
        return len(self.latencies_ns)


Call = Callable[[], Awaitable[str]]
"""One request; returns its outcome (``allowed``, ``denied``, ``http-500`` …)."""


async def _phase(call: Call, plan: LoadPlan, total: int, deadline: float, out: Measured) -> None:
    issued = 0

    async def worker() -> None:
        nonlocal issued
        while issued < total and time.perf_counter() < deadline:
            issued += 1
            started = time.perf_counter_ns()
            try:
                outcome = await call()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                outcome = f"error:{exc.__class__.__name__}"
            out.latencies_ns.append(time.perf_counter_ns() - started)
            out.outcomes[outcome] += 1

    await asyncio.gather(*(worker() for _ in range(max(1, plan.concurrency))))


async def closed_loop(
    call: Call,
    plan: LoadPlan,
    on_start: Callable[[], None] = lambda: None,
    on_stop: Callable[[Measured], None] = lambda _m: None,
) -> Measured:
    """Warm up (``plan.warmup`` requests, not recorded), call ``on_start``, run the
    measured phase, call ``on_stop`` with its result, return it."""
    warm = Measured()
    await _phase(call, plan, plan.warmup, time.perf_counter() + plan.max_seconds, warm)
    measured = Measured()
    on_start()
    started = time.perf_counter()
    await _phase(call, plan, plan.requests, started + plan.max_seconds, measured)
    measured.wall_seconds = time.perf_counter() - started
    on_stop(measured)
    return measured


def outcome_of(status: int, raw: bytes) -> str:
    """``allowed`` / ``allowed+patch`` / ``denied`` for an AdmissionReview answer,
    ``http-<status>`` for anything else."""
    if status != 200:
        return f"http-{status}"
    try:
        response = orjson.loads(raw).get("response") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return "unparseable"
    if not response.get("allowed"):
        return "denied"
    return "allowed+patch" if response.get("patch") else "allowed"


@dataclass(frozen=True, slots=True)
class Webhook:
    """Where to POST AdmissionReviews: URL, client TLS context, the name the
    serving certificate carries."""

    base_url: str
    tls: ssl.SSLContext
    server_hostname: str


async def post_reviews(
    target: Webhook,
    path: str,
    body: bytes,
    plan: LoadPlan,
    on_start: Callable[[], None] = lambda: None,
    on_stop: Callable[[Measured], None] = lambda _m: None,
) -> Measured:
    """POST ``body`` to ``target``'s ``path`` in a closed loop over keep-alive TLS
    connections (one per worker)."""
    connector = aiohttp.TCPConnector(ssl=target.tls, limit=plan.concurrency)
    headers = {"Content-Type": "application/json"}
    url = target.base_url + path
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def call() -> str:
            async with session.post(
                url, data=body, headers=headers, server_hostname=target.server_hostname
            ) as resp:
                return outcome_of(resp.status, await resp.read())

        return await closed_loop(call, plan, on_start, on_stop)
