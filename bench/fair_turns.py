"""Fair turns: both submit paths at their real cadences, in one sustained mixed burst,
with ``ELB_GATE_FAIR_TURNS`` off and then on (``make bench ARGS="--scenario fair-turns"``).

Each mode gets a fresh gated namespace and a real ``python -m webhook`` registered with
the shipped configurations, the submitter identities naming the two paths (the
dashboard's token-file user; the OpenAPI service's ServiceAccount, whose token is bound
to a running Pod). Then ``per_path`` searches of each path start at once, each the
existing task loop (:class:`testbed.submit_task.SubmitTask`) around that path's own
Lease client (:mod:`testbed.clients`) at that path's cadence:

* the dashboard's Celery task: busy or full → again after 30 s plus 0..10 s of jitter
  (``_gate_requeue_countdown``);
* the OpenAPI dispatcher's ``acquire_run_slot``: busy or full → again after 5 s
  (``_SLOT_POLL_SECONDS``), as many at once as ``ELB_OPENAPI_MAX_ACTIVE_SUBMISSIONS``
  lets it (its default, 1, never has more than one search waiting or running: the
  unfairness needs a value at or above the ceiling, which is what is measured).

Each search is ElasticBLAST's cloud-job-submission shape (``submit-jobs``, two
``blastn`` batches, ``elb-finalizer``) created with ``kubectl create`` as the path's own
identity under its Lease, every pod running ``search_seconds``. A watch of the search
Jobs (:class:`bench.handoff.SearchObserver`) times each admission and each freed slot.

Per mode: the share of admissions per path while both paths had a search waiting
(*contended* admissions), each path's longest and mean wait (task start → its search's
first Job admitted), the idle slot time (handoff: a slot freed while a search waited →
the next admission; p50 and max), the makespan, and the fair-turn refusals the webhook
answered.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.cluster_load import _kubectl_create, search_file
from bench.handoff import SearchObserver, analyse
from elbgate.census import census
from elbgate.names import SEARCH_JOB_SELECTOR, UNFINISHED_JOB_FIELD_SELECTOR
from testbed import elastic_blast as elb
from testbed.clients import DashboardLeaseClient, LeaseClient, OpenApiLeaseClient
from testbed.controlplane import ControlPlane
from testbed.submit_task import SubmitTask
from testbed.watch import Watch
from testbed.webhook_process import WebhookProcess

DASHBOARD_USER = "dashboard-lease"
OPENAPI_SERVICE_ACCOUNT = "elb-openapi"
PATHS = ("dashboard", "openapi")
IDENTITIES = f"""\
submitters:
  - name: dashboard
    holderPrefix: dashboard-
    users: [{DASHBOARD_USER}]
  - name: openapi
    holderPrefix: openapi-
    groups: [system:serviceaccounts]
"""
GRACE_SECONDS = 300.0


@dataclass(frozen=True)
class FairConfig:
    """Sizes of the scenario."""

    per_path: int = 6
    search_seconds: float = 20.0
    dashboard_countdown: float = 30.0
    dashboard_jitter: float = 10.0
    """The dashboard requeues after 30 s plus 0..10 s (``_gate_requeue_countdown``)."""
    openapi_countdown: float = 5.0
    modes: tuple[str, ...] = ("off", "on")
    burst_timeout: float = 1500.0
    stagger: bool = True
    """Each path's tasks start spread over one of its cadences (task ``i`` of ``n`` at
    ``i/n`` of it), as submits arriving over time do; ``False``: all at one instant, so
    the dashboard's tasks poll on one beat."""

    @classmethod
    def quick(cls) -> FairConfig:
        """Tiny: proves the scenario end to end (numbers meaningless)."""
        return cls(
            per_path=2,
            search_seconds=2.0,
            dashboard_countdown=3.0,
            dashboard_jitter=1.0,
            openapi_countdown=0.5,
            burst_timeout=300.0,
        )


def _count_active(cp: ControlPlane, namespace: str) -> Callable[[], int]:
    """The clients' own Gate B count while holding the Lease (an uncached LIST)."""

    def count() -> int:
        jobs = cp.admin.list(
            "jobs",
            namespace,
            label_selector=SEARCH_JOB_SELECTOR,
            field_selector=UNFINISHED_JOB_FIELD_SELECTOR,
        )
        return census(jobs, datetime.now(UTC), GRACE_SECONDS).count

    return count


def contended_shares(admitted: Mapping[str, float], path_of: Mapping[str, str]) -> dict[str, Any]:
    """Admissions per path among those made while every path still had a search
    waiting (not yet admitted)."""
    order = sorted(admitted, key=lambda k: admitted[k])
    left = {p: sum(1 for k in path_of if path_of[k] == p) for p in PATHS}
    counted = {p: 0 for p in PATHS}
    for key in order:
        if all(left[p] > 0 for p in PATHS):
            counted[path_of[key]] += 1
        left[path_of[key]] -= 1
    total = sum(counted.values())
    return {
        "admissions": counted,
        "share": {p: (counted[p] / total if total else float("nan")) for p in PATHS},
        "order": [path_of[k] for k in order],
    }


def burst(
    cp: ControlPlane, workdir: Path, config: FairConfig, mode: str, tag: int
) -> dict[str, Any]:
    """One mode: a fresh namespace and webhook, ``per_path`` searches of each path."""
    identities = workdir / "submitters.yaml"
    identities.write_text(IDENTITIES)
    env = {"ELB_GATE_SUBMITTER_IDENTITIES_FILE": str(identities), "ELB_GATE_FAIR_TURNS": mode}
    with WebhookProcess(cp, env, workdir=workdir / f"webhook-{mode}") as hook:
        namespace = hook.install.gate(cp.new_namespace(f"fair-{mode}"))
        openapi_pod = cp.pod_identity(namespace, OPENAPI_SERVICE_ACCOUNT)
        ids = [elb.search_id((tag << 16) + i) for i in range(2 * config.per_path)]
        path_of = {job_id: PATHS[n % 2] for n, job_id in enumerate(ids)}
        observer = SearchObserver(set(ids), 3, GRACE_SECONDS)
        watch = Watch(
            cp.admin,
            "jobs",
            observer.on_event,
            namespace=namespace,
            label_selector=SEARCH_JOB_SELECTOR,
        ).start()
        stop = threading.Event()
        tasks: list[SubmitTask] = []
        started: dict[str, float] = {}
        try:
            observer.start()
            for job_id in ids:
                path = search_file(workdir, namespace, job_id, config.search_seconds)
                client: LeaseClient
                if path_of[job_id] == "dashboard":
                    client = DashboardLeaseClient.on(cp, DASHBOARD_USER, namespace)
                    kubeconfig = cp.kubeconfig(DASHBOARD_USER)
                    countdown, jitter = config.dashboard_countdown, config.dashboard_jitter
                else:
                    client = OpenApiLeaseClient.on(cp, openapi_pod, namespace)
                    kubeconfig = openapi_pod.kubeconfig
                    countdown, jitter = config.openapi_countdown, 0.0
                tasks.append(
                    SubmitTask(
                        job_id,
                        client,
                        _count_active(cp, namespace),
                        _kubectl_create(kubeconfig, path, workdir),
                        ceiling=3,
                        stop=stop,
                        countdown=countdown,
                        jitter=jitter,
                    )
                )
            offsets = [
                (task.countdown * (n // 2) / config.per_path if config.stagger else 0.0, n)
                for n, task in enumerate(tasks)
            ]
            begin = time.monotonic()
            for offset, n in sorted(offsets):
                time.sleep(max(0.0, begin + offset - time.monotonic()))
                started[tasks[n].name] = time.monotonic()
                tasks[n].start()
            deadline = time.monotonic() + config.burst_timeout
            for task in tasks:
                task.join(max(1.0, deadline - time.monotonic()))
            ok = sum(1 for t in tasks if t.outcome.exit_code == 0)
            observer.wait_all_finished(ok, max(1.0, deadline - time.monotonic()))
        finally:
            stop.set()
            watch.stop()
        log = hook.log()
    timeline = observer.timeline
    result = analyse(timeline)
    waits: dict[str, list[float]] = {p: [] for p in PATHS}
    for job_id, at in timeline.admitted.items():
        waits[path_of[job_id]].append(at - started[job_id])
    refusals = sum(
        1
        for line in log.splitlines()
        if line.startswith("{") and json.loads(line).get("reason") == "fair_turn"
    )
    handoffs = sorted(result.handoffs)
    return {
        "mode": mode,
        "admitted": len(timeline.admitted),
        "failed": {t.name: t.outcome.errors[-3:] for t in tasks if t.outcome.exit_code != 0},
        "contended": contended_shares(timeline.admitted, path_of),
        "longest_wait_s": {p: max(w) if w else float("nan") for p, w in waits.items()},
        "mean_wait_s": {p: statistics.fmean(w) if w else float("nan") for p, w in waits.items()},
        "handoffs_s": handoffs,
        "handoff_p50_s": statistics.median(handoffs) if handoffs else float("nan"),
        "handoff_max_s": handoffs[-1] if handoffs else float("nan"),
        "makespan_s": result.makespan,
        "peak_active": observer.peak,
        "fair_turn_refusals": refusals,
        "tries": {p: sum(t.outcome.tries for t in tasks if path_of[t.name] == p) for p in PATHS},
    }


def run(
    cp: ControlPlane, workdir: Path, config: FairConfig, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Every mode of ``config``, one after another on ``cp``."""
    out: dict[str, Any] = {"config": asdict(config), "modes": {}}
    for n, mode in enumerate(config.modes):
        progress(
            f"fair turns {mode}: {config.per_path} dashboard searches "
            f"({config.dashboard_countdown:g} s + 0..{config.dashboard_jitter:g} s) + "
            f"{config.per_path} OpenAPI searches "
            f"({config.openapi_countdown:g} s), {config.search_seconds:g} s pods, ceiling 3, "
            + ("starts spread over each cadence" if config.stagger else "all at once")
        )
        mode_dir = workdir / f"fair-{mode}"
        mode_dir.mkdir(parents=True, exist_ok=True)
        out["modes"][mode] = burst(cp, mode_dir, config, mode, 0xFA00 + n)
    return out


def table(report: Mapping[str, Any]) -> str:
    """The figures, one row per figure, one column per mode (Markdown)."""
    modes = list(report["modes"])
    rows = [
        "| figure | " + " | ".join(f"fair turns {m}" for m in modes) + " |",
        "|---|" + "---|" * len(modes),
    ]

    def row(name: str, cell: Callable[[Mapping[str, Any]], str]) -> None:
        rows.append(f"| {name} | " + " | ".join(cell(report["modes"][m]) for m in modes) + " |")

    def seconds(key: str, path: str) -> Callable[[Mapping[str, Any]], str]:
        return lambda r: f"{r[key][path]:.1f} s"

    def share(path: str) -> Callable[[Mapping[str, Any]], str]:
        def cell(r: Mapping[str, Any]) -> str:
            c = r["contended"]
            return f"{c['admissions'][path]} ({100 * c['share'][path]:.0f} %)"

        return cell

    for p in PATHS:
        row(f"contended admissions, {p}", share(p))
    for p in PATHS:
        row(f"longest wait, {p}", seconds("longest_wait_s", p))
    for p in PATHS:
        row(f"mean wait, {p}", seconds("mean_wait_s", p))
    row("handoff p50 (idle slot)", lambda r: f"{r['handoff_p50_s']:.1f} s")
    row("handoff max", lambda r: f"{r['handoff_max_s']:.1f} s")
    row("handoffs", lambda r: str(len(r["handoffs_s"])))
    row("makespan", lambda r: f"{r['makespan_s']:.1f} s")
    row("admission order", lambda r: " ".join(x[0].upper() for x in r["contended"]["order"]))
    row("fair-turn refusals", lambda r: str(r["fair_turn_refusals"]))
    row("peak active", lambda r: str(r["peak_active"]))
    return "\n".join(rows)
