"""The measurements: what is sent where, in what order, and paired with which floor.

The webhook reads the real API server (``localkube``, :mod:`bench.cluster`) with its
own ServiceAccount's token, bound by the RBAC ``manifests/`` ships; AdmissionReviews
are POSTed straight to its HTTPS port (the API server's admission chain is not in
between: its cost is the API server's, the same with or without elb-gate).

Layout on a 2-core machine: the webhooks and the no-op floor servers (never loaded at
the same time) and the bare-API client run on CPU 0; the load generator (this
process) and the control plane (etcd, kube-apiserver, the controllers) run on CPU 1.
Each measured figure is taken ``repeats`` times. Search admission's latency is measured
side by side with its floors, one request of each per round (the order rotated every
round), so a ratio compares two things measured over the same seconds of the machine;
the fast paths' runs are each paired with a floor run made moments before.

Per workload, two passes: a *latency* pass (one request at a time, so p50/p99
are service times, not queueing) and a *saturation* pass (``concurrency``
requests in flight), over which the server's CPU is read from /proc — CPU per
request, and requests per CPU-second: the rate one fully used core sustains.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import admission_order, cluster_load, controller_scale, reclaim_latency, reviews
from bench.child_processes import ApiFloorSteps, NoopServer
from bench.cluster import FINALIZER_GRACE_SECONDS, BenchCluster
from bench.cluster_load import LoadConfig
from bench.load import (
    LoadPlan,
    Measured,
    Reviews,
    Steps,
    Webhook,
    combined,
    interleaved,
    post_reviews,
    rotated,
)
from bench.processes import CpuMeter, can_pin, pin
from bench.profiling import fold, start_recording
from bench.stats import latency, percentile
from elbgate.settings import WebhookSettings
from testbed import holders
from testbed.certs import WEBHOOK_HOST
from testbed.webhook_process import WebhookProcess

NAMESPACE_PREFIX = "bench"
HOLDER = "alice"
"""The user that holds the submit Lease and creates the finalizer."""
WEBHOOK_TIMEOUT_SECONDS = 5.0
"""``timeoutSeconds`` of the configured webhooks (manifests/base/admission-webhooks.yaml)."""
DEFAULT_API_TIMEOUT_SECONDS = WebhookSettings().api_timeout_seconds
"""The webhook's own API deadline (``ELB_GATE_API_TIMEOUT_SECONDS``) when the run sets none."""
SERVER_CPU, CLIENT_CPU = 0, 1
SEARCH_WEBHOOK = "search-admission.elb-gate.io"
CAPACITY_ENV = {
    "ELB_GATE_CAPACITY": "deny",
    "ELB_GATE_CAPACITY_POOL_SELECTOR": "agentpool=blastpool",
    "ELB_GATE_CAPACITY_POD_CPU": "4",
}
"""The node-capacity rule on (issue 13), over the control plane's blast pool (3 nodes of
15740m): 3 pods of 4 CPUs per node, so the effective ceiling stays 3 and the measured
admission is admitted (the finalizer carries no requests: the setting's value is used)."""

SLICES = 4
ALONE_MAX_SECONDS = 120.0
"""Deadline of a pass of the measured webhook on its own: generous, it is not cut short
(its rounds are the same at every Job count, so its p99s compare like with like)."""
"""Slices of a search-admission saturation pass: the webhook and its floors take turns,
so a slow stretch of the machine falls on all of them rather than on one."""

JOBS_PATH, LEASE_MUTATE, LEASE_VALIDATE = "/validate/jobs", "/mutate/leases", "/validate/leases"


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Sizes and counts of one benchmark run."""

    job_counts: tuple[int, ...] = (0, 30, 300, 3000)
    repeats: int = 3
    latency: LoadPlan = LoadPlan(concurrency=1, requests=200, warmup=20, max_seconds=2.5)
    saturation: LoadPlan = LoadPlan(concurrency=16, requests=1500, warmup=50, max_seconds=2.0)
    large: int = 1000
    """From this many Jobs on, one admission's LIST costs the API server tens of ms: the
    passes below keep the run short and keep the API server's queue under the webhook's
    1.5 s API deadline (16 in flight would make it fail closed: a benchmark of 503s)."""
    latency_large: LoadPlan = LoadPlan(concurrency=1, requests=60, warmup=5, max_seconds=4.0)
    saturation_large: LoadPlan = LoadPlan(concurrency=4, requests=300, warmup=8, max_seconds=3.0)
    profile_at: tuple[int, ...] = ()
    """Job counts at which the webhook is profiled (py-spy) during an extra saturation pass."""
    profile_seconds: float = 5.0
    fast_paths: bool = True
    capacity: bool = True
    """Also measure search admission with the node-capacity rule on (``cap.n<N>``)."""
    census_list: bool = True
    """Also measure search admission with ``ELB_GATE_CENSUS_READ=list`` (``list.n<N>``):
    the census LIST per admission that the measured webhook's fenced watch read replaces."""
    load: LoadConfig | None = LoadConfig()
    """The cluster-load phase at the largest Job count (``None``: skipped)."""
    reclaim_runs: int = 3
    """Runs per dead-holder reclaim case (0: skipped)."""
    reclaim_cases: tuple[str, ...] = ()
    """Reclaim cases to run (empty: all of :data:`testbed.holders.CASES`)."""
    order_requests: int = admission_order.DEFAULT_REQUESTS
    """Reviews per kind of the admission-order phase (:mod:`bench.admission_order`; 0: skipped)."""
    controller_scale: bool = True
    """At each Job count, the real controller's start-up, relist, leader change and RSS
    (:mod:`bench.controller_scale`)."""
    api_timeout_seconds: float | None = None
    """``ELB_GATE_API_TIMEOUT_SECONDS`` of the measured webhooks, and the read deadline of
    the no-op making the same reads (``None``: the webhook's default). Above the default, a
    census LIST that a loaded control plane answers in more than 1.5 s is still measured as
    an admission instead of a fail-closed refusal; it must stay below the webhooks'
    ``timeoutSeconds`` (:data:`WEBHOOK_TIMEOUT_SECONDS`), as the chart requires."""

    finalizer_grace_seconds: int | None = None
    """``BLAST_FINALIZER_GRACE_SECONDS`` of the measured webhooks (``None``: the default,
    300). A fill's finishing finalizers are younger than it, so counted active, and each
    Job count is measured once it has passed: a shorter grace only shortens that wait."""

    @property
    def api_timeout(self) -> float:
        """The API deadline the measured webhooks use."""
        if self.api_timeout_seconds is None:
            return DEFAULT_API_TIMEOUT_SECONDS
        return self.api_timeout_seconds

    def webhook_env(self) -> dict[str, str]:
        """What the run adds to the measured webhooks' environment."""
        env = {}
        if self.api_timeout_seconds is not None:
            env["ELB_GATE_API_TIMEOUT_SECONDS"] = f"{self.api_timeout_seconds:g}"
        if self.finalizer_grace_seconds is not None:
            env["BLAST_FINALIZER_GRACE_SECONDS"] = str(self.finalizer_grace_seconds)
        return env

    @classmethod
    def quick(cls) -> BenchConfig:
        """Tiny counts: proves the harness end to end in seconds (numbers meaningless)."""
        return cls(
            job_counts=(0, 3),
            repeats=1,
            latency=LoadPlan(1, 10, 2, 2.0),
            saturation=LoadPlan(2, 20, 2, 2.0),
            latency_large=LoadPlan(1, 10, 2, 2.0),
            saturation_large=LoadPlan(2, 20, 2, 2.0),
            load=LoadConfig.quick(),
            reclaim_runs=1,
            reclaim_cases=("pod_deleted",),
            order_requests=admission_order.QUICK_REQUESTS,
        )

    def plans_for(self, jobs: int) -> tuple[LoadPlan, LoadPlan]:
        """(latency pass, saturation pass) at ``jobs`` Jobs in the namespace."""
        if jobs >= self.large:
            return self.latency_large, self.saturation_large
        return self.latency, self.saturation


@dataclass(frozen=True, slots=True)
class FastWorkload:
    """An admission request answered without an API call."""

    key: str
    label: str
    path: str
    body: bytes
    expect: str


@dataclass
class Series:
    """Per-run values of every measured quantity, by name (``hook.n30.p50_ms``)."""

    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    outcomes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    notes: list[str] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.values[name].append(value)

    def get(self, name: str) -> list[float]:
        return list(self.values.get(name, []))

    def check(self, name: str, m: Measured, expect: Callable[[str], bool]) -> None:
        """Keep the outcomes; note any answer the workload should not have had (a
        benchmark of errors or denials would measure the wrong path)."""
        self.outcomes[name].update(m.outcomes)
        wrong = {k: v for k, v in m.outcomes.items() if not expect(k)}
        if wrong:
            self.notes.append(f"{name}: unexpected outcomes {wrong}")


def _latency_into(series: Series, prefix: str, m: Measured) -> None:
    lat = latency(m.latencies_ns)
    series.add(f"{prefix}.p50_ms", lat.p50_ms)
    series.add(f"{prefix}.p99_ms", lat.p99_ms)


def _saturation_into(series: Series, prefix: str, m: Measured, server: str) -> None:
    cpu = m.cpu_seconds.get(server, math.nan)
    series.add(f"{prefix}.cpu_us", cpu / m.count * 1e6 if m.count else math.nan)
    series.add(f"{prefix}.per_cpu_second", m.count / cpu if cpu > 0 else math.nan)
    series.add(f"{prefix}.rate", m.count / m.wall_seconds if m.wall_seconds else math.nan)
    if "apiserver" in m.cpu_seconds and m.count:
        # kube-apiserver and etcd (localkube), over the same pass: what each request costs
        # the control plane (the LIST's filtering and encoding, the GET).
        series.add(f"{prefix}.apiserver_cpu_us", m.cpu_seconds["apiserver"] / m.count * 1e6)
    series.add(f"{prefix}.utilisation", cpu / m.wall_seconds if m.wall_seconds else math.nan)
    for other, used in m.cpu_seconds.items():
        if other != server and m.wall_seconds:
            series.add(f"{prefix}.{other}_utilisation", used / m.wall_seconds)


def _server_saturation_into(series: Series, prefix: str, m: Measured) -> None:
    _saturation_into(series, prefix, m, "server")


REFUSED = "refused"


def _admitted_only(
    series: Series,
    prefix: str,
    m: Measured,
    values: Callable[[Series, str, Measured], None] | Series,
) -> None:
    """Record a search-admission pass's figures (``values``: what would be recorded under
    ``prefix``, or a function recording them) as the admitted path's only if every
    measured request was allowed. Otherwise each becomes ``nan`` under ``prefix`` (the
    table reports no admitted-path figure for it; the runs stay paired by index) and is
    kept under ``<prefix>.refused`` in results.json: the latency and CPU of the same reads
    and a refusal, which is not an admission's."""
    if isinstance(values, Series):
        scratch = values
    else:
        scratch = Series()
        values(scratch, prefix, m)
    admitted = bool(m.outcomes) and all(o == "allowed" for o in m.outcomes)
    for key, got in scratch.values.items():
        for value in got:
            if admitted:
                series.add(key, value)
            else:
                series.add(key, math.nan)
                series.add(f"{prefix}.{REFUSED}{key[len(prefix) :]}", value)


class Harness:
    """The processes under measurement, and the passes run against them."""

    def __init__(self, config: BenchConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.pinned = (os.cpu_count() or 1) >= 2 and can_pin({SERVER_CPU, CLIENT_CPU})
        self.server_cpu = SERVER_CPU if self.pinned else None
        self.client_cpu = CLIENT_CPU if self.pinned else None
        self.cluster = BenchCluster(
            workdir,
            self.client_cpu,
            max(config.job_counts, default=0),
            config.finalizer_grace_seconds or FINALIZER_GRACE_SECONDS,
        )
        self.webhook: WebhookProcess | None = None
        self.capacity_webhook: WebhookProcess | None = None
        self.list_webhook: WebhookProcess | None = None
        self.noop: NoopServer | None = None
        self.reads_noop: NoopServer | None = None
        self.series = Series()
        self.fast_workloads: list[FastWorkload] = []
        self.namespace = ""
        self.load: dict[str, Any] | None = None
        """What :func:`bench.cluster_load.run` measured."""
        self.reclaim: dict[str, Any] | None = None
        self.order: dict[str, Any] | None = None
        """What :func:`bench.reclaim_latency.run` measured."""
        self.controller_scale: dict[int, dict[str, Any]] = {}
        """What :func:`bench.controller_scale.measure` measured, by Job count."""

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        if self.client_cpu is not None:
            pin(0, {self.client_cpu})
        self.cluster.start()
        self.namespace = self.cluster.control_plane.new_namespace(NAMESPACE_PREFIX)
        self.cluster.namespace(self.namespace)
        self.cluster.hold_lease(self.namespace, HOLDER)
        # Not registered with the API server: AdmissionReviews go straight to its port.
        env = self.config.webhook_env()
        self.webhook = self._webhook("elb-gate-webhook-bench", env)
        if self.config.capacity:
            self.capacity_webhook = self._webhook(
                "elb-gate-webhook-capacity", {**CAPACITY_ENV, **env}
            )
        if self.config.census_list:
            self.list_webhook = self._webhook(
                "elb-gate-webhook-list", {"ELB_GATE_CENSUS_READ": "list", **env}
            )
        cert = self.webhook.certificate
        self.noop = NoopServer(cert.cert_file, cert.key_file, self.server_cpu).start()
        self.reads_noop = NoopServer(
            cert.cert_file,
            cert.key_file,
            self.server_cpu,
            reads=self.webhook.kubeconfig,
            read_deadline=self.config.api_timeout,
        ).start()

    def _webhook(self, pod: str, env: dict[str, str]) -> WebhookProcess:
        hook = WebhookProcess(
            self.cluster.control_plane,
            env=env,
            workdir=self.workdir / pod,
            register=False,
            pod=pod,
        ).start()
        assert hook.process is not None
        if self.server_cpu is not None:
            pin(hook.process.pid, {self.server_cpu})
        return hook

    def stop_admission_servers(self) -> None:
        """The webhooks and no-op servers of the admission passes (idle afterwards)."""
        for server in (self.noop, self.reads_noop):
            if server is not None:
                server.stop()
        for hook in (self.webhook, self.capacity_webhook, self.list_webhook):
            if hook is not None:
                hook.stop()
        self.noop = self.reads_noop = None
        self.webhook = self.capacity_webhook = self.list_webhook = None

    def stop(self) -> None:
        self.stop_admission_servers()
        if self.cluster.cp is not None and self.namespace:
            try:
                self.cluster.control_plane.admin.delete("namespaces", None, self.namespace)
            except Exception:  # the control plane may be gone already
                pass
        self.cluster.stop()

    @property
    def hook_pid(self) -> int:
        assert self.webhook is not None and self.webhook.process is not None
        return self.webhook.process.pid

    def _targets(self) -> tuple[Webhook, Webhook]:
        assert self.webhook is not None and self.noop is not None
        tls = self.webhook.client_context()
        return (
            Webhook(self.webhook.url, tls, WEBHOOK_HOST),
            Webhook(self.noop.url, tls, WEBHOOK_HOST),
        )

    # -- passes ------------------------------------------------------------------

    async def _saturate(
        self, target: Webhook, path: str, body: bytes, server_pid: int, plan: LoadPlan
    ) -> Measured:
        apiserver = tuple(self.cluster.apiserver_pids())
        meter = CpuMeter((server_pid, os.getpid(), *apiserver))

        def stop(m: Measured) -> None:
            used, _ = meter.stop()
            m.cpu_seconds["server"] = used[0]
            m.cpu_seconds["load_generator"] = used[1]
            m.cpu_seconds["apiserver"] = sum(used[2:])

        return await post_reviews(target, path, body, plan, meter.start, stop)

    async def _pair(
        self,
        prefix: str,
        target: Webhook,
        path: str,
        body: bytes,
        pid: int,
        expect: str,
    ) -> None:
        """Latency pass then saturation pass of one workload on one server."""
        s = self.series
        latency_plan, saturation_plan = self.config.plans_for(0)
        m = await post_reviews(target, path, body, latency_plan)
        s.check(prefix, m, lambda o: o == expect)
        _latency_into(s, prefix, m)
        m = await self._saturate(target, path, body, pid, saturation_plan)
        s.check(prefix, m, lambda o: o == expect)
        _saturation_into(s, prefix, m, "server")

    @asynccontextmanager
    async def _profiled(self, series: Series, prefix: str) -> AsyncIterator[None]:
        """What explains a latency pass, kept under ``prefix``: how the measured webhook
        read the census (a read that fell back to the LIST costs a LIST) and its fenced
        reads' two phases, from its /metrics (``outcomes <prefix>.census_reads`` and
        ``.census_fence``); and the API server's garbage collection over the pass (a
        fenced read waits on the API server, and so on any collection meanwhile)."""

        hook = self.webhook
        assert hook is not None

        def census() -> dict[str, Counter[str]]:
            return {"reads": hook.census_reads(), "fence": hook.census_fence()}

        reads_before = await asyncio.to_thread(census)
        gc_before = await asyncio.to_thread(self.cluster.apiserver_gc)
        yield
        gc_after = await asyncio.to_thread(self.cluster.apiserver_gc)
        reads_after = await asyncio.to_thread(census)
        for kind, counts in reads_after.items():
            series.outcomes[f"{prefix}.census_{kind}"].update(counts - reads_before[kind])
        series.add(f"{prefix}.apiserver_gc_cycles", gc_after["cycles"] - gc_before["cycles"])
        gc_seconds = gc_after["cpu_seconds"] - gc_before["cpu_seconds"]
        series.add(f"{prefix}.apiserver_gc_cpu_ms", gc_seconds * 1e3)
        series.add(f"{prefix}.apiserver_heap_live_mb", gc_after["heap_live_bytes"] / 1e6)

    async def fast_paths(self) -> None:
        """Requests answered with no API call, each next to the no-op handler given
        the same bytes; plus the no-op's cost for the search-admission body."""
        assert self.noop is not None
        hook, noop = self._targets()
        now = datetime.now(UTC)
        search = reviews.new_search_finalizer(self.namespace, HOLDER)
        workloads = [
            FastWorkload(
                "fast.job_update",
                "fast path: Job UPDATE adding no gated label",
                JOBS_PATH,
                reviews.job_controller_update(self.namespace),
                "allowed",
            ),
            FastWorkload(
                "fast.other_lease",
                "fast path: Lease not elb-blast-submit-*",
                LEASE_VALIDATE,
                reviews.other_lease_update(self.namespace),
                "allowed",
            ),
            FastWorkload(
                "lease.stamp",
                "Lease stamp (holder renews, full PUT)",
                LEASE_MUTATE,
                reviews.submit_lease_renew(self.namespace, HOLDER, now, stamped=False),
                "allowed+patch",
            ),
            FastWorkload(
                "lease.guard",
                "Lease guard (holder renews)",
                LEASE_VALIDATE,
                reviews.submit_lease_renew(self.namespace, HOLDER, now, stamped=True),
                "allowed",
            ),
        ]
        for _ in range(self.config.repeats):
            await self._pair("noop.search", noop, JOBS_PATH, search, self.noop.pid, "allowed")
            if not self.config.fast_paths:
                continue
            for w in workloads:
                await self._pair(f"noop.{w.key}", noop, w.path, w.body, self.noop.pid, "allowed")
                await self._pair(w.key, hook, w.path, w.body, self.hook_pid, w.expect)
        if self.config.fast_paths:
            self.fast_workloads = workloads

    async def search_admission(self, jobs: int) -> None:
        """Search admission at ``jobs`` Jobs in the namespace, against the bare API round
        trip (LIST + GET, same client), the no-op handler and the no-op making the same
        reads; and with the node-capacity rule on, against it off.

        Latency: all of them side by side, one request each per round
        (:func:`bench.load.interleaved`), in ``repeats`` blocks; a block is one paired
        run of every ratio. Saturation: per repeat, :data:`SLICES` short passes of
        each, taken in turns (the order rotated every slice) and summed."""
        assert self.noop is not None and self.reads_noop is not None
        assert self.webhook is not None
        hook, noop = self._targets()
        have = await asyncio.to_thread(self.cluster.fill, self.namespace, jobs)
        if have != jobs:
            self.series.notes.append(f"asked for {jobs} Jobs, the namespace holds {have}")
        # The mix's finishing finalizers just written are younger than the finalizer
        # grace: live, so counted active. Measure on the namespace as it is once they age
        # (an old history's finalizers are), not on a ceiling the fill itself filled.
        wait = self.cluster.young_finishing_until - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        # A fresh hold: the Lease must not expire (900 s) while a long run measures.
        await asyncio.to_thread(self.cluster.hold_lease, self.namespace, HOLDER)
        body = reviews.new_search_finalizer(self.namespace, HOLDER)
        s, n = self.series, f"n{jobs}"
        latency_plan, saturation_plan = self.config.plans_for(jobs)
        reads = Webhook(self.reads_noop.url, hook.tls, WEBHOOK_HOST)
        servers: dict[str, tuple[Webhook, int]] = {
            "reads": (reads, self.reads_noop.pid),
            "hook": (hook, self.hook_pid),
        }
        logged = {"hook": self.webhook}
        cap = self.capacity_webhook
        if cap is not None and cap.process is not None:
            servers["cap"] = (Webhook(cap.url, cap.client_context(), WEBHOOK_HOST), cap.process.pid)
            logged["cap"] = cap
        listing = self.list_webhook
        if listing is not None and listing.process is not None:
            servers["list"] = (
                Webhook(listing.url, listing.client_context(), WEBHOOK_HOST),
                listing.process.pid,
            )
            logged["list"] = listing
        expect_floor: Callable[[str], bool] = lambda o: o.endswith("lease=yes")  # noqa: E731
        expect_allowed: Callable[[str], bool] = lambda o: o == "allowed"  # noqa: E731
        floor = ApiFloorSteps(
            self.webhook.kubeconfig, self.namespace, self.server_cpu, latency_plan.warmup
        )
        async with AsyncExitStack() as stack:
            steps: dict[str, Steps] = {"api": await stack.enter_async_context(floor)}
            for name, target in (("noop", noop), *((k, v[0]) for k, v in servers.items())):
                steps[name] = await stack.enter_async_context(Reviews(target, JOBS_PATH, body))
            for block in range(self.config.repeats):
                offsets = {name: _log_size(w) for name, w in logged.items()}
                async with self._profiled(s, f"hook.{n}"):
                    measured = await interleaved(
                        steps,
                        latency_plan.requests,
                        latency_plan.warmup if block == 0 else 0,
                        latency_plan.max_seconds * len(steps),
                    )
                for name, m in measured.items():
                    if name == "api":
                        s.check(f"{name}.{n}", m, expect_floor)
                        _latency_into(s, f"{name}.{n}", m)
                    else:
                        s.check(f"{name}.{n}", m, expect_allowed)
                        _admitted_only(s, f"{name}.{n}", m, _latency_into)
                for name, w in logged.items():
                    ms = _handler_durations_ms(w.log_file, offsets[name], SEARCH_WEBHOOK)
                    handler = Series()
                    handler.add(f"{name}.{n}.handler_p50_ms", percentile(ms, 50))
                    _admitted_only(s, f"{name}.{n}", measured[name], handler)
            # The measured webhook on its own, beside the no-op only, with the same
            # rounds at every count (the pass above has fewer from `large` Jobs on: the
            # LIST comparators take most of its seconds). Between their requests the
            # fenced census shares the API server with whole-namespace LISTs and the
            # garbage they leave; on its own it shows how its own path grows.
            alone = {"noop": steps["noop"], "hook": steps["hook"]}
            rounds = self.config.latency.requests
            for block in range(self.config.repeats):
                offset = _log_size(self.webhook)
                async with self._profiled(s, f"alone.hook.{n}"):
                    measured = await interleaved(
                        alone,
                        rounds,
                        self.config.latency.warmup if block == 0 else 0,
                        ALONE_MAX_SECONDS,
                    )
                for name, m in measured.items():
                    s.check(f"alone.{name}.{n}", m, expect_allowed)
                    _admitted_only(s, f"alone.{name}.{n}", m, _latency_into)
                ms = _handler_durations_ms(self.webhook.log_file, offset, SEARCH_WEBHOOK)
                handler = Series()
                handler.add(f"alone.hook.{n}.handler_p50_ms", percentile(ms, 50))
                handler.add(f"alone.hook.{n}.handler_p99_ms", percentile(ms, 99))
                _admitted_only(s, f"alone.hook.{n}", measured["hook"], handler)
            # Saturation: each repeat in SLICES slices, one short pass of each per
            # slice, the order rotated every slice; a repeat sums its slices.
            sliced = _sliced(saturation_plan)
            for _ in range(self.config.repeats):
                parts: dict[str, list[Measured]] = defaultdict(list)
                for k in range(SLICES):
                    for name in rotated(["api", *servers], k):
                        if name == "api":
                            parts[name].append(await floor.closed_loop(sliced))
                        else:
                            target, pid = servers[name]
                            m = await self._saturate(target, JOBS_PATH, body, pid, sliced)
                            parts[name].append(m)
                for name, measured_parts in parts.items():
                    m = combined(measured_parts)
                    if name == "api":
                        s.check(f"{name}.{n}", m, expect_floor)
                        _saturation_into(s, f"{name}.{n}", m, "api_floor")
                    else:
                        s.check(f"{name}.{n}", m, expect_allowed)
                        _admitted_only(s, f"{name}.{n}", m, _server_saturation_into)
        if jobs in self.config.profile_at:
            await self.profile(f"search at {jobs} Jobs", hook, JOBS_PATH, body, saturation_plan)

    async def profile(
        self, name: str, target: Webhook, path: str, body: bytes, plan: LoadPlan
    ) -> None:
        """py-spy the webhook through one saturation pass; keep the folded summary."""
        out = self.workdir / f"profile-{len(self.series.profiles)}.txt"
        try:
            recorder = start_recording(self.hook_pid, self.config.profile_seconds, out)
        except RuntimeError as exc:
            self.series.notes.append(f"profile {name}: {exc}")
            return
        longer = LoadPlan(plan.concurrency, 10**9, 0, self.config.profile_seconds + 0.5)
        await asyncio.sleep(0.3)  # py-spy attaches
        await post_reviews(target, path, body, longer)
        _, err = await asyncio.to_thread(recorder.communicate)
        if not out.exists():
            self.series.notes.append(f"profile {name}: py-spy failed: {err.decode()[-500:]}")
            return
        self.series.profiles[name] = fold(out.read_text().splitlines()).as_text()


def _sliced(plan: LoadPlan) -> LoadPlan:
    """One of :data:`SLICES` slices of ``plan``; each warms every connection again."""
    return LoadPlan(
        plan.concurrency,
        math.ceil(plan.requests / SLICES),
        max(plan.warmup // SLICES, 2 * plan.concurrency),
        plan.max_seconds / SLICES,
    )


def _log_size(hook: WebhookProcess) -> int:
    try:
        return hook.log_file.stat().st_size
    except OSError:
        return 0


def _handler_durations_ms(log_file: Path, offset: int, webhook: str) -> list[float]:
    """``duration_ms`` of the ``webhook`` requests logged after byte ``offset``: the
    webhook times its own handler (reads and policy, no HTTP)."""
    with open(log_file, "rb") as fh:
        fh.seek(offset)
        lines = fh.read().splitlines()
    out: list[float] = []
    marker = webhook.encode()
    for line in lines:
        if marker in line and b"duration_ms" in line:
            try:
                out.append(float(orjson.loads(line)["duration_ms"]))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
    return out


def run(config: BenchConfig, workdir: Path, progress: Callable[[str], None]) -> Harness:
    """Start everything, run every pass, stop everything; the harness holds the series."""
    harness = Harness(config, workdir)
    started = time.perf_counter()

    async def passes() -> None:
        progress("fast paths and the no-op floor")
        await harness.fast_paths()
        for jobs in config.job_counts:
            progress(f"search admission at {jobs} Jobs")
            await harness.search_admission(jobs)
            if config.controller_scale:
                progress(f"the controller at {jobs} Jobs")
                harness.controller_scale[jobs] = await asyncio.to_thread(
                    controller_scale.measure, harness.cluster, harness.namespace, jobs, progress
                )

    try:
        progress("starting the control plane, the webhooks and the no-op servers")
        harness.start()
        asyncio.run(passes())
        harness.stop_admission_servers()
        if config.load is not None:
            harness.load = cluster_load.run(
                harness.cluster,
                harness.namespace,
                workdir / "load",
                config.load,
                progress,
                harness.server_cpu,
            )
        if config.reclaim_runs:
            progress(f"dead-holder reclaim: {config.reclaim_runs} runs per case")
            harness.reclaim = reclaim_latency.run(
                config.reclaim_runs,
                config.reclaim_cases or tuple(holders.CASES),
                lambda m: progress(f"reclaim: {m}"),
                cp=harness.cluster.control_plane,
            )
        if config.order_requests:
            harness.order = admission_order.run(
                harness.cluster.control_plane, config.order_requests, progress
            )
    finally:
        harness.stop()
    progress(f"measured in {time.perf_counter() - started:.0f}s")
    return harness


def describe_layout(harness: Harness) -> dict[str, Any]:
    """Where each process ran (for results.json)."""
    return {
        "pinned": harness.pinned,
        "webhook_and_noop_cpu": harness.server_cpu,
        "load_generator_and_control_plane_cpu": harness.client_cpu,
        "control_plane": "localkube (attached)" if harness.cluster.attached else "localkube",
        "control_plane_pinned": harness.cluster.pinned,
    }
