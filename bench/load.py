"""The load generator: a closed loop of ``concurrency`` workers over keep-alive
connections, a warm-up phase, then a measured phase bounded by a request count
and a time limit. Latency of every measured request is taken with
``time.perf_counter_ns``."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

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


def combined(parts: Sequence[Measured]) -> Measured:
    """Several measured phases as one: their requests, seconds, CPU and outcomes added."""
    out = Measured()
    for m in parts:
        out.latencies_ns += m.latencies_ns
        out.wall_seconds += m.wall_seconds
        out.outcomes.update(m.outcomes)
        for who, used in m.cpu_seconds.items():
            out.cpu_seconds[who] = out.cpu_seconds.get(who, 0.0) + used
    return out


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
    """``allowed`` / ``allowed+patch`` / ``denied`` for an AdmissionReview answer
    (``denied-<code>`` when the refusal carries its code: ``denied-429`` Gate B,
    ``denied-503`` fail-closed), ``http-<status>`` for anything else."""
    if status != 200:
        return f"http-{status}"
    try:
        response = orjson.loads(raw).get("response") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return "unparseable"
    if not response.get("allowed"):
        code = (response.get("status") or {}).get("code")
        return f"denied-{code}" if isinstance(code, int) else "denied"
    return "allowed+patch" if response.get("patch") else "allowed"


@dataclass(frozen=True, slots=True)
class Webhook:
    """Where to POST AdmissionReviews: URL, client TLS context, the name the
    serving certificate carries."""

    base_url: str
    tls: ssl.SSLContext
    server_hostname: str


T = TypeVar("T")


def rotated(items: Sequence[T], k: int) -> list[T]:
    """``items`` rotated left by ``k`` (modulo its length): who goes first takes turns."""
    k %= len(items)
    return [*items[k:], *items[:k]]


class Steps(Protocol):
    """Something measured one request at a time: each step's latency and outcome."""

    async def step(self) -> tuple[int, str]: ...


class Reviews:
    """AdmissionReview POSTs of one body to one path of ``target``, over ``connections``
    keep-alive TLS connections. Use as ``async with Reviews(target, path, body) as r``."""

    def __init__(self, target: Webhook, path: str, body: bytes, connections: int = 1) -> None:
        self.target, self.url, self.body = target, target.base_url + path, body
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Reviews:
        connector = aiohttp.TCPConnector(ssl=self.target.tls, limit=self.connections)
        timeout = aiohttp.ClientTimeout(total=30)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def post(self) -> str:
        """One POST; its outcome (a connection error raises)."""
        assert self._session is not None
        async with self._session.post(
            self.url,
            data=self.body,
            headers={"Content-Type": "application/json"},
            server_hostname=self.target.server_hostname,
        ) as resp:
            return outcome_of(resp.status, await resp.read())

    async def step(self) -> tuple[int, str]:
        """One POST, timed (:class:`Steps`); a connection error is its outcome."""
        started = time.perf_counter_ns()
        try:
            outcome = await self.post()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            outcome = f"error:{exc.__class__.__name__}"
        return time.perf_counter_ns() - started, outcome


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
    async with Reviews(target, path, body, plan.concurrency) as reviews:
        return await closed_loop(reviews.post, plan, on_start, on_stop)


async def interleaved(
    steps: Mapping[str, Steps], rounds: int, warmup: int, max_seconds: float
) -> dict[str, Measured]:
    """Latency of several things measured side by side: after ``warmup`` steps of
    each, every round takes one step of each, in an order rotated by one every round,
    until ``rounds`` rounds or ``max_seconds``. Each sees the same seconds of the
    machine (its background work, its noise), so a ratio of two of them compares
    like with like; measured one after another, seconds apart, the same two p50s
    drift apart by tens of percent on a shared machine."""
    names = list(steps)
    for name in names:
        for _ in range(warmup):
            await steps[name].step()
    out = {name: Measured() for name in names}
    started = time.perf_counter()
    deadline = started + max_seconds
    for r in range(rounds):
        if time.perf_counter() >= deadline:
            break
        for name in rotated(names, r):
            elapsed, outcome = await steps[name].step()
            out[name].latencies_ns.append(elapsed)
            out[name].outcomes[outcome] += 1
    wall = time.perf_counter() - started
    for m in out.values():
        m.wall_seconds = wall
    return out
