"""The whole system on the control plane at 3,000 Jobs: API server requests per admitted
search, per Lease renewal and per controller resync; handoff latency and burst makespan
of the submit paths.

The namespace the admission passes filled (:mod:`bench.scenarios`) becomes a gated
namespace: its two running searches end, the benchmark's Lease and the admission record
its reviews wrote go, and it is labelled
``elb-gate.io/gated=true``. Then, with the real webhook registered (the shipped webhook
configurations, :mod:`testbed.webhook_process`) and the controller running, both at the
default settings and each with its own ServiceAccount's token:

1. **per controller resync**: a quiet window of a few resync periods;
2. **per Lease renewal**: elb-gate's client (``SubmitLease.renew``) and the two existing
   clients (:mod:`testbed.clients`) renew a held Lease, one after another;
3. **a burst of ``elb-gate submit``**: ``searches`` submitters start at once, each
   ``elb-gate submit -- kubectl create -f <its search's Jobs>``, and wait in line by
   watching (commits 9d6b81b, 3493aa3);
4. **a burst of the existing clients' 30 s polling**: :class:`testbed.submit_task.SubmitTask`
   around the dashboard's and the OpenAPI service's Lease clients, alternately.

Each search is ElasticBLAST's cloud-job-submission shape with its batch Jobs created by
the submitter (``submit-jobs``, two ``blastn`` batches, ``elb-finalizer``; bodies from
:mod:`testbed.elastic_blast`), every pod running ``search_seconds`` on the kubelet
stand-in, so the searches are equal. Every component reaches the API server through a
:class:`testbed.faultproxy.FaultProxy` of its own (no faults: it forwards and counts), so
each request is attributed to one of: the submitters (Lease, census, waiting line, and
the searches' own Job POSTs), the webhook, the controller.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.api_counts import Tally, combined, tally
from bench.cluster import BenchCluster
from bench.handoff import BurstResult, SearchObserver, analyse
from bench.processes import pin, unpinned
from client.submit_lease import SubmitLease
from elbgate.kube.config import KubeConfig
from elbgate.names import LIVENESS_CONFIGMAP, SEARCH_JOB_SELECTOR
from elbgate.settings import Settings
from testbed import elastic_blast as elb
from testbed.api import Api
from testbed.clients import DashboardLeaseClient, LeaseClient, OpenApiLeaseClient
from testbed.controller_process import ControllerProcess
from testbed.controlplane import REPO, ControlPlane, kubectl_path
from testbed.faultproxy import FaultProxy
from testbed.holders import free_leader_lease, reconciles
from testbed.submit_task import CELERY_COUNTDOWN_SECONDS, SubmitTask
from testbed.waiting import wait_until
from testbed.watch import Watch
from testbed.webhook_process import WebhookProcess

SHIPPED = Settings()
"""The shipped defaults (the leader's timing is measured at them)."""
ELB_GATE = str(Path(sys.executable).with_name("elb-gate"))
WEBHOOK_POD = "elb-gate-webhook-load"
CONTROLLER_POD = "elb-gate-controller-load"
BATCHES = 2
NUM_CPUS = 4
"""elastic-blast's num-cpus: each batch pod requests 2 CPUs, so 3 searches fit the pool."""
COMPONENTS = ("submitters", "webhook", "controller")


@dataclass(frozen=True)
class LoadConfig:
    """Sizes of the cluster-load phase."""

    searches: int = 10
    search_seconds: float = 15.0
    """How long each pod of a search runs (equal searches)."""
    poll_searches: int = 6
    """Searches of the 30 s-polling burst: one is admitted per poll round, so 10 would
    take five minutes; 6 show the same pattern in half the time."""
    poll_countdown: float = CELERY_COUNTDOWN_SECONDS
    submit_bursts: int = 1
    """Bursts of ``elb-gate submit``, pooled: each gives ``searches - ceiling`` handoffs (7),
    so ``--submit-bursts 2`` gives a p99 over 14 (80 s more)."""
    renewals: int = 20
    resync_seconds: float = 30.0
    """The controller's ELB_GATE_RESYNC_SECONDS (its default)."""
    resync_periods: int = 2
    burst_timeout: float = 900.0

    @classmethod
    def quick(cls) -> LoadConfig:
        """Tiny: proves the phase end to end (numbers meaningless)."""
        return cls(
            searches=4,
            search_seconds=2.0,
            poll_searches=4,
            poll_countdown=2.0,
            submit_bursts=1,
            renewals=2,
            resync_seconds=1.0,
            resync_periods=2,
            burst_timeout=300.0,
        )


# -- the searches --------------------------------------------------------------------


def search_jobs(namespace: str, job_id: str, seconds: float) -> list[dict[str, Any]]:
    """One search's Jobs in ``elastic-blast submit``'s order, every pod running ``seconds``."""
    jobs = [
        elb.submit_jobs(job_id, num_nodes=BATCHES),
        *(elb.blast_batch(job_id, n, num_cpus=NUM_CPUS) for n in range(BATCHES)),
        elb.finalizer(job_id),
    ]
    return [elb.for_api(j, namespace, run_seconds=seconds) for j in jobs]


def search_file(directory: Path, namespace: str, job_id: str, seconds: float) -> Path:
    """The search's Jobs as one List, for ``kubectl create -f`` (created in order)."""
    path = directory / f"{job_id}.json"
    path.write_text(
        json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": search_jobs(namespace, job_id, seconds)}
        )
    )
    return path


# -- counting ------------------------------------------------------------------------


class Counters:
    """The three counting proxies, and slices of what each forwarded."""

    def __init__(self, proxies: Mapping[str, FaultProxy]) -> None:
        self.proxies = dict(proxies)

    def mark(self) -> dict[str, int]:
        return {name: len(p.requests) for name, p in self.proxies.items()}

    def since(self, mark: Mapping[str, int]) -> dict[str, Tally]:
        return {name: tally(p.requests[mark[name] :]) for name, p in self.proxies.items()}


def per_unit(tallies: Mapping[str, Tally], units: float) -> dict[str, Any]:
    """Requests per unit by component and in all, with the detail by resource."""
    out: dict[str, Any] = {name: t.per(units) for name, t in tallies.items()}
    out["all"] = combined(tallies).per(units)
    out["units"] = units
    out["detail"] = {name: t.detail() for name, t in tallies.items()}
    return out


# -- the phase -----------------------------------------------------------------------


@dataclass
class Stage:
    """What runs during the phase."""

    cp: ControlPlane
    namespace: str
    workdir: Path
    counters: Counters
    submit_proxy: FaultProxy
    webhook: WebhookProcess
    controller: ControllerProcess
    settings: Settings

    def kubeconfig(self, user: str) -> str:
        """``user``'s kubeconfig through the submitters' proxy."""
        return self.submit_proxy.kubeconfig(self.cp.token(user), user)

    def api(self, user: str) -> Api:
        return Api(self.submit_proxy.url, self.submit_proxy.ca_file, self.cp.token(user))


@contextmanager
def stage(
    cluster: BenchCluster, namespace: str, workdir: Path, config: LoadConfig, cpu: int | None
) -> Iterator[Stage]:
    """The namespace gated, the webhook registered and the controller leading, each
    behind its counting proxy; everything stopped on exit."""
    cp = cluster.control_plane
    assert cluster.install is not None
    cluster.finish_running(namespace)
    cluster.drop_lease(namespace)
    cluster.drop_admission_record(namespace)
    cluster.namespace(namespace, gated=True)
    with ExitStack() as stack:
        proxies = {name: stack.enter_context(FaultProxy(cp)) for name in COMPONENTS}
        hook_identity = cluster.install.identity("webhook", WEBHOOK_POD)
        hook = WebhookProcess(
            cp,
            workdir=workdir / WEBHOOK_POD,
            pod=WEBHOOK_POD,
            kubeconfig=proxies["webhook"].kubeconfig(hook_identity.token, "webhook"),
        )
        stack.callback(hook.stop)
        hook.start()
        if cpu is not None and hook.process is not None:
            pin(hook.process.pid, {cpu})
        ctl_identity = cluster.install.identity("controller", CONTROLLER_POD)
        free_leader_lease(cp)
        controller = ControllerProcess.start(
            cp,
            name=CONTROLLER_POD,
            namespaces=[namespace],
            resync_seconds=config.resync_seconds,
            leader_lease_seconds=SHIPPED.controller.leader_lease_seconds,
            leader_renew_seconds=SHIPPED.controller.leader_renew_seconds,
            env={"KUBECONFIG": proxies["controller"].kubeconfig(ctl_identity.token, "controller")},
            ready_timeout=90,
        )
        stack.callback(controller.stop)
        controller.wait_until(controller.is_leader, 120, "the controller to lead")
        wait_until(
            lambda: cp.admin.find("configmaps", namespace, LIVENESS_CONFIGMAP) is not None,
            120,
            "the controller's first reconcile",
        )
        yield Stage(
            cp,
            namespace,
            workdir,
            Counters(proxies),
            proxies["submitters"],
            hook,
            controller,
            Settings.of(namespaces=(namespace,)),
        )


def measure_resync(st: Stage, config: LoadConfig) -> dict[str, Any]:
    """Requests over a quiet window of ``resync_periods`` resyncs (nothing else writes)."""
    time.sleep(min(5.0, config.resync_seconds))  # let the start-up writes settle
    mark, before = st.counters.mark(), reconciles(st.controller)
    time.sleep(config.resync_seconds * config.resync_periods)
    tallies = st.counters.since(mark)
    out = per_unit(tallies, config.resync_periods)
    out["reconciles"] = reconciles(st.controller) - before
    out["resync_seconds"] = config.resync_seconds
    return out


def _settle(seconds: float = 2.0) -> None:
    """Give the controller and the webhook time to react to the last write."""
    time.sleep(seconds)


def measure_renewals(st: Stage, config: LoadConfig) -> dict[str, Any]:
    """Requests per renewal of a held Lease, for elb-gate's client and the two existing
    ones (each acquires, renews ``renewals`` times, releases)."""
    out: dict[str, Any] = {}
    user = st.cp.plain_user()

    lease = SubmitLease(
        st.namespace,
        gate=st.settings.gate,
        config=KubeConfig.from_kubeconfig(st.kubeconfig(user)),
        source="bench",
    )
    try:
        if not lease.acquire().acquired:
            raise RuntimeError("elb-gate's client could not take a free Lease")
        _settle()
        mark = st.counters.mark()
        for _ in range(config.renewals):
            lease.renew()
            time.sleep(0.2)
        _settle()
        out["elb-gate client"] = per_unit(st.counters.since(mark), config.renewals)
        lease.release()
    finally:
        lease.close()
    _settle()

    clients: dict[str, LeaseClient] = {
        "dashboard client": DashboardLeaseClient(
            st.submit_proxy.url, st.submit_proxy.ca_file, st.cp.token(user), st.namespace
        ),
        "openapi client": OpenApiLeaseClient(
            st.kubeconfig(user),
            st.namespace,
            cache_dir=str(st.workdir / "kubectl-cache"),
        ),
    }
    for name, client in clients.items():
        if client.acquire() != "acquired":
            raise RuntimeError(f"the {name} could not take a free Lease")
        _settle()
        mark = st.counters.mark()
        for _ in range(config.renewals):
            if client.acquire() != "renewed":
                raise RuntimeError(f"the {name}'s renewal failed")
            time.sleep(0.2)
        _settle()
        out[name] = per_unit(st.counters.since(mark), config.renewals)
        client.release()
        _settle()
    return out


def _observe(st: Stage, ids: set[str]) -> tuple[SearchObserver, Watch]:
    observer = SearchObserver(ids, st.settings.gate.max_run_concurrency, 300.0)
    watch = Watch(
        st.cp.admin,
        "jobs",
        observer.on_event,
        namespace=st.namespace,
        label_selector=SEARCH_JOB_SELECTOR,
    ).start()
    return observer, watch


def _burst_ids(tag: int, n: int) -> list[str]:
    return [elb.search_id((tag << 16) + i) for i in range(n)]


def _child_env(kubeconfig: str, workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELB_GATE_", "BLAST_"))}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.update(
        KUBECONFIG=kubeconfig,
        KUBECACHEDIR=str(workdir / "kubectl-cache"),
        PYTHONUNBUFFERED="1",
    )
    return env


class TimedOutput:
    """A child's output lines, each with the monotonic time it was read."""

    def __init__(self, proc: subprocess.Popen[bytes], spawned: float) -> None:
        self.proc = proc
        self.spawned = spawned
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))

    def join(self) -> None:
        self._thread.join(10)

    def last(self, prefix: str, before: float) -> float | None:
        """When the last line starting with ``prefix`` before ``before`` was read."""
        found = [t for t, line in self.lines if line.startswith(prefix) and t <= before]
        return found[-1] if found else None

    def text(self, started: float) -> str:
        return "\n".join(f"{t - started:8.3f} {line}" for t, line in self.lines)


def submit_phases(
    result: BurstResult, outputs: Mapping[str, TimedOutput], admitted: Mapping[str, float]
) -> dict[str, list[float]]:
    """Where the time of each ``elb-gate submit`` goes, from its status lines: process
    start-up (spawn to its first line); per handoff, slot free to the Lease held
    (``checking_capacity``: the watch saw the slot, the line's turn came, the Lease
    CAS), the Lease held to ``ready`` (the census LIST), and ``ready`` to its first Job
    admitted (COMMAND: kubectl's start-up and the POST through the webhook)."""
    out: dict[str, list[float]] = {"process_start": [], "wake_and_lease": [], "census": []}
    out["command"] = []
    for out_ in outputs.values():
        if out_.lines:
            out["process_start"].append(out_.lines[0][0] - out_.spawned)
    for job_id, at in admitted.items():
        ready = outputs[job_id].last("elb-gate: ready", at) if job_id in outputs else None
        if ready is not None:
            out["command"].append(at - ready)
    for freed, at, job_id in result.matched:
        output = outputs.get(job_id)
        if output is None:
            continue
        held = output.last("elb-gate: checking_capacity", at)
        ready = output.last("elb-gate: ready", at)
        if held is not None and ready is not None and held >= freed:
            out["wake_and_lease"].append(held - freed)
            out["census"].append(ready - held)
    return out


def burst_elb_gate_submit(st: Stage, config: LoadConfig, tag: int) -> dict[str, Any]:
    """``searches`` ``elb-gate submit`` processes at once; the result and the requests."""
    ids = _burst_ids(tag, config.searches)
    files = [search_file(st.workdir, st.namespace, i, config.search_seconds) for i in ids]
    observer, watch = _observe(st, set(ids))
    logs = st.workdir / f"burst-{tag}"
    logs.mkdir(exist_ok=True)
    outputs: dict[str, TimedOutput] = {}
    codes: list[int | None] = []
    try:
        mark = st.counters.mark()
        observer.start()
        for job_id, path in zip(ids, files, strict=True):
            user = st.cp.plain_user()
            argv = [ELB_GATE, "-n", st.namespace, "submit", "--source", "bench", "--"]
            argv += [str(kubectl_path()), "create", "-f", str(path)]
            spawned = time.monotonic()
            proc = subprocess.Popen(
                argv,
                cwd=REPO,
                env=_child_env(st.kubeconfig(user), st.workdir),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=unpinned,
            )
            outputs[job_id] = TimedOutput(proc, spawned)
        deadline = time.monotonic() + config.burst_timeout
        codes = [o.proc.wait(max(1.0, deadline - time.monotonic())) for o in outputs.values()]
        ok = sum(1 for c in codes if c == 0)
        observer.wait_all_finished(ok, max(1.0, deadline - time.monotonic()))
        _settle()
        tallies = st.counters.since(mark)
    finally:
        for o in outputs.values():
            if o.proc.poll() is None:
                o.proc.kill()
                o.proc.wait(10)
            o.join()
        watch.stop()
    started = observer.timeline.started
    for job_id, o in outputs.items():
        (logs / f"{job_id}.log").write_text(o.text(started) + "\n")
    failed = {
        i: outputs[i].text(started)[-500:] for i, c in zip(ids, codes, strict=False) if c != 0
    }
    report = _burst_report(observer, tallies, failed, "elb-gate submit", config.searches)
    phases = submit_phases(analyse(observer.timeline), outputs, observer.timeline.admitted)
    report["phases_s"] = phases
    return report


def burst_polling(st: Stage, config: LoadConfig, tag: int) -> dict[str, Any]:
    """The existing clients' task loop (30 s re-queue) around their Lease clients,
    dashboard and OpenAPI alternately, one search each, all at once."""
    ids = _burst_ids(tag, config.poll_searches)
    files = [search_file(st.workdir, st.namespace, i, config.search_seconds) for i in ids]
    observer, watch = _observe(st, set(ids))
    stop = threading.Event()
    tasks: list[SubmitTask] = []
    grace = float(st.settings.gate.finalizer_grace_seconds)
    try:
        mark = st.counters.mark()
        observer.start()
        for n, (job_id, path) in enumerate(zip(ids, files, strict=True)):
            user = st.cp.plain_user()
            kubeconfig = st.kubeconfig(user)
            client: LeaseClient
            if n % 2 == 0:
                client = DashboardLeaseClient(
                    st.submit_proxy.url, st.submit_proxy.ca_file, st.cp.token(user), st.namespace
                )
            else:
                client = OpenApiLeaseClient(
                    kubeconfig, st.namespace, cache_dir=str(st.workdir / "kubectl-cache")
                )
            reader = st.api(user)
            tasks.append(
                SubmitTask(
                    job_id,
                    client,
                    _census_counter(reader, st.namespace, grace),
                    _kubectl_create(kubeconfig, path, st.workdir),
                    ceiling=st.settings.gate.max_run_concurrency,
                    stop=stop,
                    countdown=config.poll_countdown,
                )
            )
        for task in tasks:
            task.start()
        deadline = time.monotonic() + config.burst_timeout
        for task in tasks:
            task.join(max(1.0, deadline - time.monotonic()))
        ok = sum(1 for t in tasks if t.outcome.exit_code == 0)
        observer.wait_all_finished(ok, max(1.0, deadline - time.monotonic()))
        _settle()
        tallies = st.counters.since(mark)
    finally:
        stop.set()
        watch.stop()
    failed = {
        t.name: f"exit {t.outcome.exit_code}: {t.outcome.output[-300:]} {t.outcome.errors[-3:]}"
        for t in tasks
        if t.outcome.exit_code != 0
    }
    label = f"{config.poll_countdown:g} s polling (dashboard + OpenAPI clients)"
    return _burst_report(observer, tallies, failed, label, config.poll_searches)


def _census_counter(reader: Api, namespace: str, grace: float) -> Callable[[], int]:
    from elbgate.census import census
    from elbgate.names import UNFINISHED_JOB_FIELD_SELECTOR

    def count() -> int:
        jobs = reader.list(
            "jobs",
            namespace,
            label_selector=SEARCH_JOB_SELECTOR,
            field_selector=UNFINISHED_JOB_FIELD_SELECTOR,
        )
        return census(jobs, datetime.now(UTC), grace).count

    return count


def _kubectl_create(kubeconfig: str, path: Path, workdir: Path) -> Callable[[], tuple[bool, str]]:
    def create() -> tuple[bool, str]:
        done = subprocess.run(
            [str(kubectl_path()), "create", "-f", str(path)],
            env=_child_env(kubeconfig, workdir),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            preexec_fn=unpinned,
        )
        return done.returncode == 0, (done.stdout + done.stderr).strip()

    return create


def _burst_report(
    observer: SearchObserver,
    tallies: Mapping[str, Tally],
    failed: Mapping[str, str],
    label: str,
    searches: int,
) -> dict[str, Any]:
    result: BurstResult = analyse(observer.timeline)
    admitted = max(1, result.searches)
    return {
        "label": label,
        "searches": searches,
        "result": result.as_dict(),
        "peak_active": observer.peak,
        "failed": dict(failed),
        "api_per_search": per_unit(tallies, admitted),
    }


def merge_bursts(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Several bursts of the same kind as one report: handoffs, start-ups, durations and
    phases pooled; makespans and their baselines one per burst; requests per search
    weighted by each burst's admitted searches."""
    if len(reports) == 1:
        return reports[0]
    first = reports[0]
    pooled = ("handoffs_s", "startups_s", "durations_s")
    per_burst = ("makespan_s", "span_s", "ideal_s", "waves_s", "makespan_ratio", "waves_ratio")
    result: dict[str, Any] = {k: [x for r in reports for x in r["result"][k]] for k in pooled}
    result.update({k: [r["result"][k] for r in reports] for k in per_burst})
    result["searches"] = sum(r["result"]["searches"] for r in reports)
    result["finished"] = sum(r["result"]["finished"] for r in reports)
    out: dict[str, Any] = {
        "label": first["label"],
        "searches": first["searches"],
        "bursts": len(reports),
        "result": result,
        "peak_active": max(r["peak_active"] for r in reports),
        "failed": {k: v for r in reports for k, v in r["failed"].items()},
        "api_per_search": _merge_per_unit([r["api_per_search"] for r in reports]),
    }
    if "phases_s" in first:
        out["phases_s"] = {
            k: [x for r in reports for x in r["phases_s"][k]] for k in first["phases_s"]
        }
    return out


def _merge_per_unit(parts: list[dict[str, Any]]) -> dict[str, Any]:
    units = sum(float(p["units"]) for p in parts)
    out: dict[str, Any] = {}
    for key in parts[0]:
        if key in ("units", "detail"):
            continue
        out[key] = {
            kind: sum(p[key][kind] * float(p["units"]) for p in parts) / units
            for kind in parts[0][key]
        }
    detail: dict[str, dict[str, int]] = {}
    for p in parts:
        for component, counts in p["detail"].items():
            mine = detail.setdefault(component, {})
            for name, n in counts.items():
                mine[name] = mine.get(name, 0) + n
    out["units"] = units
    out["detail"] = detail
    return out


def run(
    cluster: BenchCluster,
    namespace: str,
    workdir: Path,
    config: LoadConfig,
    progress: Callable[[str], None],
    cpu: int | None = None,
) -> dict[str, Any]:
    """The whole phase in ``namespace`` (already holding its Jobs); a JSON-able report."""
    jobs = cluster.job_count(namespace)
    out: dict[str, Any] = {"jobs": jobs, "config": dataclasses.asdict(config)}
    progress(f"cluster load at {jobs} Jobs: webhook registered, controller leading")
    with stage(cluster, namespace, workdir, config, cpu) as st:
        progress(f"controller resync: {config.resync_periods} quiet resync periods")
        out["resync"] = measure_resync(st, config)
        progress(f"Lease renewals: {config.renewals} per client")
        out["renewal"] = measure_renewals(st, config)
        bursts = []
        for k in range(config.submit_bursts):
            progress(
                f"burst {k + 1}/{config.submit_bursts}: {config.searches} x elb-gate submit, "
                f"{config.search_seconds:g} s searches, "
                f"ceiling {st.settings.gate.max_run_concurrency}"
            )
            bursts.append(burst_elb_gate_submit(st, config, 0xE1B + k))
        out["burst_elb_gate"] = merge_bursts(bursts)
        progress(
            f"burst: {config.poll_searches} x the existing clients' "
            f"{config.poll_countdown:g} s polling"
        )
        out["burst_polling"] = burst_polling(st, config, 0x9011)
    return out
