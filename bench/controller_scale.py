"""The real controller against a namespace of N Jobs (``make bench --jobs ...``).

At each Job count of the run, on the benchmark's namespace as filled
(:mod:`bench.namespace_jobs`), two ``python -m controller`` processes at the default
settings, each through a :class:`testbed.faultproxy.FaultProxy` of its own that forwards
and counts every answer's bytes:

* **start-up to synced**: spawn → ``/readyz`` 200 (every watch listed and up);
* **a relist after 410**: every watch stream ended cleanly (as a server timeout ends it),
  the Jobs watch's resume answered 410 Gone, until ``/readyz`` is 200 again; the bytes of
  the Jobs LISTs it read (pages and lookups) on the wire (gzip above 128 KiB) and decoded,
  the latter against the decoded bytes of one unfiltered LIST of the same Jobs
  (``app in (…)``, every Job of the history) read here as the administrator;
* **a leader change**: the leader is stopped (SIGTERM: it releases its Lease), until the
  second process, synced meanwhile, leads; the bytes of Jobs LISTs read during it;
* **RSS**: ``/proc/<pid>/status`` sampled every 50 ms: steady (5 s after synced, leading)
  and peak (``VmHWM``: the most the process ever held, start-up and relist included).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.cluster import BenchCluster
from controller.server import LIVE_JOBS, job_selector
from elbgate.kube.api import JOBS, path
from elbgate.settings import Settings
from testbed.controller_process import ControllerProcess
from testbed.faultproxy import FaultProxy
from testbed.install import Installation

STEADY_AFTER_SECONDS = 5.0
DEFAULTS = {"resync_seconds": 30.0, "leader_lease_seconds": 15.0, "leader_renew_seconds": 5.0}
"""The shipped defaults (ELB_GATE_RESYNC_SECONDS, ELB_GATE_LEADER_*)."""
SYNC_TIMEOUT = 600.0


def _status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssSampler:
    """Samples one process's RSS in a thread; ``peak_mb`` of a window, ``now_mb``."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        self.pid = pid
        self.every = every
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rss-{pid}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            kb = _status_kb(self.pid, "VmRSS")
            if kb:
                self.samples.append((time.perf_counter(), kb))

    def peak_mb(self, since: float = 0.0) -> float:
        return max((kb for t, kb in self.samples if t >= since), default=0) / 1024

    def now_mb(self) -> float:
        return _status_kb(self.pid, "VmRSS") / 1024

    def hwm_mb(self) -> float:
        return _status_kb(self.pid, "VmHWM") / 1024

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def _list_bytes(proxy: FaultProxy, namespace: str, since: int) -> tuple[int, int]:
    """(bytes, requests) of the Jobs LISTs (not watches) answered after ``since``."""
    url = path(JOBS, namespace)
    got = [
        n
        for method, pq, n in proxy.answered[since:]
        if method == "GET" and urlsplit(pq).path == url and "watch=" not in pq
    ]
    return sum(got), len(got)


def _restarts(ctl: ControllerProcess) -> float:
    try:
        return ctl.metric("elb_gate_watch_restarts_total", {"resource": "jobs"}) or 0.0
    except OSError:
        return 0.0


def measure(
    cluster: BenchCluster, namespace: str, jobs: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Every figure of the module docstring at the namespace's current ``jobs`` Jobs."""
    cp = cluster.control_plane
    selector = job_selector(Settings.of(namespaces=(namespace,)).controller)
    full_bytes, full_items = cluster.list_bytes(namespace, label_selector=selector)
    live_bytes, live_items = cluster.list_bytes(
        namespace, label_selector=selector, field_selector=LIVE_JOBS
    )
    out: dict[str, Any] = {
        "jobs": jobs,
        "unfiltered_list_bytes": full_bytes,
        "unfiltered_list_items": full_items,
        "live_list_bytes": live_bytes,
        "live_list_items": live_items,
    }
    install = Installation.on(cp)
    names = [f"controller-scale-{jobs}-{k}" for k in (0, 1)]
    with FaultProxy(cp) as proxy_a, FaultProxy(cp) as proxy_b:
        env = [
            {"KUBECONFIG": p.kubeconfig(install.identity("controller", n).token, n)}
            for p, n in ((proxy_a, names[0]), (proxy_b, names[1]))
        ]
        started = time.perf_counter()
        a = ControllerProcess.start(
            cp, name=names[0], namespaces=[namespace], env=env[0], **DEFAULTS
        )
        assert a.process is not None
        rss = RssSampler(a.process.pid)
        b: ControllerProcess | None = None
        try:
            a.wait_until(a.ready, SYNC_TIMEOUT, "the controller synced")
            out["startup_to_synced_s"] = round(time.perf_counter() - started, 3)
            out["startup_list_bytes"], out["startup_list_requests"] = _list_bytes(
                proxy_a, namespace, 0
            )
            a.wait_until(a.is_leader, 60, "the controller leads")
            time.sleep(STEADY_AFTER_SECONDS)
            out["steady_rss_mb"] = round(rss.now_mb(), 1)
            progress(f"controller at {jobs} Jobs: synced in {out['startup_to_synced_s']} s")

            mark, before = len(proxy_a.answered), _restarts(a)
            proxy_a.add(method="GET", resource="jobs", watch=True, watch_gone=True, count=1)
            t = time.perf_counter()
            proxy_a.end_watches()
            a.wait_until(lambda: _restarts(a) > before, 120, "the Jobs watch restarted")
            a.wait_until(a.ready, SYNC_TIMEOUT, "the controller synced again")
            out["relist_s"] = round(time.perf_counter() - t, 3)
            out["relist_bytes"], out["relist_requests"] = _list_bytes(proxy_a, namespace, mark)
            out["relist_peak_rss_mb"] = round(rss.peak_mb(t), 1)
            time.sleep(STEADY_AFTER_SECONDS)
            out["steady_rss_after_relist_mb"] = round(rss.now_mb(), 1)
            out["peak_rss_mb"] = round(rss.hwm_mb(), 1)

            b = ControllerProcess.start(
                cp, name=names[1], namespaces=[namespace], env=env[1], **DEFAULTS
            )
            b.wait_until(b.ready, SYNC_TIMEOUT, "the second controller synced")
            mark_b = len(proxy_b.answered)
            t = time.perf_counter()
            a.terminate()
            b.wait_until(b.is_leader, 120, "the second controller leads")
            out["leader_change_s"] = round(time.perf_counter() - t, 3)
            out["leader_change_list_bytes"], _ = _list_bytes(proxy_b, namespace, mark_b)
        finally:
            rss.stop()
            for ctl in (a, b):
                if ctl is not None:
                    ctl.stop()
    # The proxies count bytes on the wire: the API server gzips answers over 128 KiB
    # for a client that accepts it (the controller's does), while the two LISTs above
    # are counted decoded. Like with like: the relist decoded is the live LIST.
    extra = max(0, out["relist_bytes"] - out["startup_list_bytes"])
    out["relist_bytes_decoded"] = live_bytes + extra
    out["relist_bytes_ratio"] = (
        round(out["relist_bytes_decoded"] / full_bytes, 5) if full_bytes else None
    )
    return out
