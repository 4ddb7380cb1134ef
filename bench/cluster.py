"""The control plane the benchmark measures against, and the Jobs it holds.

``localkube`` (:class:`testbed.controlplane.ControlPlane`): etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and the kubelet stand-in, built from the
official Kubernetes modules. The benchmark starts one of its own (and pins it to the
load generator's CPU), or attaches to one ``ELB_GATE_CONTROL_PLANE`` names (then it
pins nothing: the processes are someone else's).

Namespaces are filled with the Jobs of :mod:`bench.namespace_jobs` by concurrent POSTs
as the cluster administrator (and their status written through ``/status``), so 3,000
Jobs take seconds, not the minutes ``kubectl`` one at a time would.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import ssl
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families

from bench.namespace_jobs import api_body, job_status, planned_jobs, submit_lease
from bench.processes import pin
from elbgate.kube.api import METADATA_LIST
from elbgate.names import ADMISSION_RECORD_CONFIGMAP, CENSUS_FENCE_APP, lease_name
from testbed.api import ApiError, JsonObj
from testbed.controlplane import ATTACH_ENV, ControlPlane
from testbed.install import Installation

FILL_CONCURRENCY = 64
"""Writes in flight while a namespace is filled, over as many keep-alive connections: one
Job is a create then a status write, each a few ms of the API server's and etcd's work,
so the rate is bound by the API server's core, not by round trips."""
ETCD_QUOTA_BYTES = 8 * 1024**3
"""etcd's backend quota when a run fills 30,000 Jobs or more: each Job is written twice
(create, status) and the API server compacts only every 5 minutes, so 80,000 Jobs can
outgrow etcd's 2 GiB default before the old revisions are compacted."""
LARGE_FILL = 30_000
FINALIZER_GRACE_SECONDS = 300
"""``BLAST_FINALIZER_GRACE_SECONDS`` at its default, as the measured webhook runs."""


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


APISERVER_GC = {
    "go_gc_cycles_total_gc_cycles_total": "cycles",
    "go_cpu_classes_gc_total_cpu_seconds_total": "cpu_seconds",
    "go_gc_heap_live_bytes": "heap_live_bytes",
}
"""The Go runtime's series :meth:`BenchCluster.apiserver_gc` reads, and its names."""


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


class BenchCluster:
    """One control plane for the whole run: started (and stopped) here unless attached."""

    def __init__(
        self,
        workdir: Path,
        cpu: int | None,
        largest: int = 0,
        finalizer_grace_seconds: int = FINALIZER_GRACE_SECONDS,
    ) -> None:
        self.workdir = workdir
        self.finalizer_grace_seconds = finalizer_grace_seconds
        """The measured webhooks' ``BLAST_FINALIZER_GRACE_SECONDS``."""
        self.cpu = cpu
        self.largest = largest
        """The most Jobs a namespace will hold (sizes etcd's quota)."""
        self.young_finishing_until = 0.0
        """Until then (monotonic), finishing finalizers the last fill wrote are younger
        than the finalizer grace, so the census counts them active (a young finalizer is
        live): admission is measured after it."""
        self.fills: list[dict[str, float]] = []
        """Each fill: Jobs written, seconds, writes (create + status) per second."""
        self.cp: ControlPlane | None = None
        self.attached = bool(os.environ.get(ATTACH_ENV))
        self.install: Installation | None = None
        self.pinned = False

    def start(self) -> BenchCluster:
        if self.attached:
            self.cp = ControlPlane.attach(Path(os.environ[ATTACH_ENV]))
        else:
            quota = ETCD_QUOTA_BYTES if self.largest >= LARGE_FILL else 0
            self.cp = ControlPlane.start(self.workdir / "control-plane", etcd_quota_bytes=quota)
        self.install = Installation.on(self.cp)
        if not self.attached and self.cpu is not None:
            for pid in self.pids():
                pin(pid, {self.cpu})
            self.pinned = True
        return self

    def stop(self) -> None:
        if self.cp is not None:
            self.cp.stop()  # only stops one it started

    @property
    def control_plane(self) -> ControlPlane:
        assert self.cp is not None, "start() first"
        return self.cp

    def pids(self) -> list[int]:
        """localkube (etcd runs inside it) and its components (kube-apiserver,
        kube-controller-manager, kube-scheduler)."""
        cp = self.control_plane
        root = cp.process.pid if cp.process is not None else int(cp.state.get("pid", 0) or 0)
        if not root:
            return []
        return [root, *_children(root)]

    def apiserver_pids(self) -> list[int]:
        """What answers API requests: kube-apiserver and localkube (etcd)."""
        pids = self.pids()
        return [p for p in pids if p == pids[0] or any("kube-apiserver" in a for a in _cmdline(p))]

    def apiserver_gc(self) -> dict[str, float]:
        """kube-apiserver's Go garbage collector so far, from its /metrics: cycles, the
        CPU seconds they took, and the heap live after the last one (bytes). At tens of
        thousands of Jobs its watch cache holds them all; marking that heap takes
        seconds on one core, and every request the API server answers meanwhile waits
        on it."""
        text = self.control_plane.admin.request("GET", "/metrics")
        out = dict.fromkeys(APISERVER_GC.values(), math.nan)
        for family in text_string_to_metric_families(str(text)):
            for sample in family.samples:
                if sample.name in APISERVER_GC:
                    out[APISERVER_GC[sample.name]] = float(sample.value)
        return out

    # -- namespaces ----------------------------------------------------------------

    def namespace(self, name: str, *, gated: bool = False) -> str:
        """``name`` with the RoleBindings of a gated namespace (elb-gate's ServiceAccounts
        may read it; submitters may submit); labelled gated only when ``gated``."""
        assert self.install is not None
        return self.install.gate(name, label=gated)

    def hold_lease(self, namespace: str, user: str) -> None:
        """The submit Lease, held by ``user`` and renewed now (written as admin)."""
        self.control_plane.admin.apply(submit_lease(namespace, user, datetime.now(UTC)))

    def drop_lease(self, namespace: str) -> None:
        self.control_plane.admin.delete("leases", namespace, lease_name(namespace))

    def drop_admission_record(self, namespace: str) -> None:
        """The admission record the review passes wrote: their AdmissionReviews went to
        the webhook, never through the API server, so the first Jobs they admitted were
        reserved but never stored, and would hold slots until their entries expired."""
        if self.control_plane.admin.find("configmaps", namespace, ADMISSION_RECORD_CONFIGMAP):
            self.control_plane.admin.delete("configmaps", namespace, ADMISSION_RECORD_CONFIGMAP)

    def job_count(self, namespace: str) -> int:
        return len(self.job_names(namespace))

    def job_names(self, namespace: str) -> set[str]:
        """Every Job's name, from a paged metadata-only LIST (never the whole Jobs)."""
        return asyncio.run(self._names(namespace))

    def fill(self, namespace: str, total: int) -> int:
        """Bring ``namespace`` up to the first ``total`` Jobs of the mix; returns how
        many Jobs it holds afterwards."""
        have = self.job_names(namespace)
        missing = [j for j in planned_jobs(total) if j.name not in have]
        if missing:
            started = time.perf_counter()
            with self._unpinned():
                asyncio.run(self._create(namespace, missing))
            seconds = time.perf_counter() - started
            self.young_finishing_until = time.monotonic() + self.finalizer_grace_seconds + 5
            if not any(j.state == "finishing" for j in missing):
                self.young_finishing_until = 0.0
            self.fills.append(
                {
                    "jobs": len(missing),
                    "seconds": round(seconds, 2),
                    "writes_per_second": round(2 * len(missing) / seconds, 1),
                }
            )
        return self.job_count(namespace)

    @contextlib.contextmanager
    def _unpinned(self) -> Iterator[None]:
        """While a namespace is filled (not measured), the control plane and this process
        run on every CPU: tens of thousands of writes are bound by the API server's CPU."""
        if not self.pinned or self.cpu is None:
            yield
            return
        every = set(os.sched_getaffinity(0)) | set(range(os.cpu_count() or 1))
        pids = self.pids()
        mine = set(os.sched_getaffinity(0))
        for pid in pids:
            pin(pid, every)
        pin(0, every)
        try:
            yield
        finally:
            for pid in self.pids():
                pin(pid, {self.cpu})
            pin(0, mine)

    def list_bytes(
        self,
        namespace: str,
        *,
        label_selector: str,
        field_selector: str | None = None,
        accept: str = "application/json",
    ) -> tuple[int, int]:
        """(bytes, items) of a paged LIST as the cluster administrator, the bodies counted
        as the API server sent them (uncompressed)."""
        return asyncio.run(self._list_bytes(namespace, label_selector, field_selector, accept))

    def _session(self, accept: str = "application/json") -> aiohttp.ClientSession:
        cp = self.control_plane
        ctx = ssl.create_default_context(cafile=cp.ca_file)
        headers = {
            "Authorization": f"Bearer {cp.token('admin')}",
            "Content-Type": "application/json",
            "Accept": accept,
        }
        connector = aiohttp.TCPConnector(ssl=ctx, limit=FILL_CONCURRENCY)
        return aiohttp.ClientSession(connector=connector, headers=headers)

    async def _pages(
        self, namespace: str, query: dict[str, str], accept: str
    ) -> list[tuple[int, JsonObj]]:
        base = f"{self.control_plane.server}/apis/batch/v1/namespaces/{namespace}/jobs"
        out: list[tuple[int, JsonObj]] = []
        async with self._session(accept) as session:
            cont = ""
            while True:
                q = {**query, "limit": "500", **({"continue": cont} if cont else {})}
                async with session.get(base, params=q) as resp:
                    raw = await resp.read()
                    if resp.status != 200:
                        raise ApiError(resp.status, _decoded(raw), "GET", base)
                body: JsonObj = orjson.loads(raw)
                out.append((len(raw), body))
                cont = str((body.get("metadata") or {}).get("continue") or "")
                if not cont:
                    return out

    async def _names(self, namespace: str) -> set[str]:
        # Not the namespace's census fence (the install's, not the mix's).
        query = {"labelSelector": f"app!={CENSUS_FENCE_APP}"}
        pages = await self._pages(namespace, query, METADATA_LIST)
        return {str(i["metadata"]["name"]) for _, body in pages for i in body.get("items") or []}

    async def _list_bytes(
        self, namespace: str, label_selector: str, field_selector: str | None, accept: str
    ) -> tuple[int, int]:
        query = {"labelSelector": label_selector}
        if field_selector:
            query["fieldSelector"] = field_selector
        pages = await self._pages(namespace, query, accept)
        return sum(n for n, _ in pages), sum(len(b.get("items") or []) for _, b in pages)

    def finish_running(self, namespace: str) -> int:
        """Write the mix's running Jobs as succeeded (their searches end); returns how
        many it finished."""
        admin = self.control_plane.admin
        now = datetime.now(UTC)
        running = {j.name for j in planned_jobs(self.job_count(namespace)) if j.state == "running"}
        for name in sorted(running):
            job = admin.find("jobs", namespace, name)
            if job is None:
                continue
            status = job_status("succeeded", now - timedelta(minutes=1), now)
            status["startTime"] = (job.get("status") or {}).get("startTime", status["startTime"])
            job["status"] = status
            admin.update(job, "status")
        return len(running)

    async def _create(self, namespace: str, jobs: Iterable[Any]) -> None:
        base = f"{self.control_plane.server}/apis/batch/v1/namespaces/{namespace}/jobs"
        started = datetime.now(UTC) - timedelta(minutes=30)
        finished = started + timedelta(minutes=5)
        gate = asyncio.Semaphore(FILL_CONCURRENCY)
        async with self._session() as session:

            async def one(job: Any) -> None:
                async with gate:
                    url = f"{base}/{job.name}"
                    try:
                        created = await _send(session, "POST", base, api_body(job, namespace))
                    except ApiError as exc:
                        # A POST retried after a 5xx (a 504: the API server's deadline
                        # passed) that the API server answered once the Job was stored:
                        # it is ours.
                        if exc.status != 409:
                            raise
                        created = await _get(session, url)
                    status = job_status(job.state, started, finished)
                    for attempt in range(3):
                        created["status"] = status
                        try:
                            await _send(session, "PUT", f"{url}/status", created)
                            return
                        except ApiError as exc:
                            # The same: a retried write whose first attempt was stored
                            # moved the resourceVersion on. Write it again on the current.
                            if exc.status != 409 or attempt == 2:
                                raise
                            created = await _get(session, url)

            await asyncio.gather(*(one(j) for j in jobs))


SEND_ATTEMPTS = 8
"""Tries of one fill write answered 429, 500, 503 or 504, or whose connection closed
before the answer: tens of thousands of writes on a loaded machine meet a busy etcd (a
504 is the API server's own deadline passing). Such a write may have been stored."""


async def _send(session: aiohttp.ClientSession, method: str, url: str, body: JsonObj) -> JsonObj:
    for attempt in range(SEND_ATTEMPTS):
        last = attempt == SEND_ATTEMPTS - 1
        try:
            async with session.request(method, url, data=orjson.dumps(body)) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientConnectionError, TimeoutError):
            if last:
                raise
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
            continue
        if status < 300:
            answer: JsonObj = orjson.loads(raw)
            return answer
        if status in (429, 500, 503, 504) and not last:
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
            continue
        raise ApiError(status, _decoded(raw), method, url)
    raise AssertionError("unreachable")


async def _get(session: aiohttp.ClientSession, url: str) -> JsonObj:
    async with session.get(url) as resp:
        raw = await resp.read()
        if resp.status != 200:
            raise ApiError(resp.status, _decoded(raw), "GET", url)
        answer: JsonObj = orjson.loads(raw)
        return answer


def _decoded(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")
