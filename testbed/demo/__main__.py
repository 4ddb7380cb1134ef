"""``python -m testbed.demo [--once]`` (``make run``): elb-gate end to end on a real
Kubernetes control plane.

Starts the control plane (``localkube``), two webhook replicas behind one Service and
the controller, all at their default settings, plays the story
(:mod:`testbed.demo.scenario`) with a live timeline, prints the summary, then stays up
for poking until Ctrl-C. ``--once`` exits after the summary: status 0 only if
every expectation held. ``--dashboard PATH`` also runs a Prometheus scraping both
webhook replicas and the controller (as a ServiceMonitor would) and, after the summary,
draws the shipped Grafana dashboard over the run into PATH (``make dashboard-png``:
docs/dashboard.png). ``--system-tier`` plays the same story with the chart installed
as shipped on real kubelet nodes (root; :mod:`testbed.demo.system`). Child processes
and temporary files are removed on every way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

from elbgate.names import LIVENESS_CONFIGMAP, lease_name
from manifests.render_dashboard import render
from testbed import elastic_blast as elb
from testbed.controlplane import kubectl_path
from testbed.demo.scenario import Scenario
from testbed.demo.searches import search_manifests
from testbed.demo.summary import summarize
from testbed.demo.system import DASHBOARD_APPLY_USER, ROGUE_USER, System, start_system
from testbed.demo.timeline import Timeline
from testbed.prometheus import CONTROLLER_JOB, WEBHOOK_JOB, PrometheusServer, Target
from testbed.rig import Rig
from testbed.system_tier import unavailable

RULE = "─" * 78


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    """Ctrl-C and SIGTERM end the demo through the cleanup below. Installed for SIGINT
    too, not left to Python's default: Python keeps SIGINT ignored when the demo was
    started with it ignored (any background job of a non-interactive shell, a CI
    runner's), and a demo that cannot be interrupted leaves every process running."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def poke_instructions(system: System) -> list[str]:
    """How to look around while the demo stays up."""
    cp, ns, root = system.cp, system.namespace, system.root
    manifest = root / "a-search-job.json"
    first = search_manifests(ns, elb.search_id(), batch_work=True)[0]
    manifest.write_text(json.dumps(first))
    hook = next(iter(system.webhook_urls.values()))
    return [
        RULE,
        "It stays up. In another terminal:",
        f"  export KUBECONFIG={cp.kubeconfig('admin')} PATH={kubectl_path().parent}:$PATH",
        f"  kubectl -n {ns} get jobs,pods,leases,configmaps,events",
        f"  kubectl -n {ns} get lease {lease_name(ns)} -o yaml",
        f"  kubectl -n {ns} get configmap {LIVENESS_CONFIGMAP} -o jsonpath='{{.data}}'",
        f"  .venv/bin/elb-gate -n {ns} census        # what the webhook would decide now",
        f"  kubectl --kubeconfig {cp.kubeconfig(ROGUE_USER)} create -f {manifest}"
        "   # Gate A says no",
        f"  curl -s {hook}/metrics | grep elb_gate_admission_requests_total",
        f"  curl -s {system.controller_url}/liveness",
        f"  curl -s {system.controller_url}/metrics | grep -E 'elb_gate_(in_use|leases_re)'",
        "Kubeconfigs (token-file users and the OpenAPI pod's bound token; RBAC as shipped):",
        *(f"  {user:<18} {cp.kubeconfig(user)}" for user in ("admin", DASHBOARD_APPLY_USER)),
        f"  {system.openapi.pod:<18} {system.openapi.kubeconfig}",
        f"  {ROGUE_USER:<18} {cp.kubeconfig(ROGUE_USER)}",
        "Ctrl-C stops everything and removes the temporary files.",
    ]


def scrape_targets(rig: Rig) -> list[Target]:
    """Both webhook replicas and the controller, labelled as their ServiceMonitor labels them."""
    hooks = [
        Target(WEBHOOK_JOB, h.metrics_url.removeprefix("http://"), h.identity.pod)
        for h in rig.hooks
    ]
    controller = rig.controllers[0]
    return [*hooks, Target(CONTROLLER_JOB, f"127.0.0.1:{controller.metrics_port}", controller.name)]


def draw_dashboard(prom: PrometheusServer, out: Path, timeline: Timeline) -> bool:
    """The shipped dashboard over the whole run, from what Prometheus scraped (once it
    has scraped the end state); False when a panel's query failed."""
    # Two scrape intervals on: the last point of every range query then reads a scrape
    # taken after the story ended.
    prom.wait_for_scrape_after(time.time() + 2 * prom.scrape_seconds)
    minutes = (time.time() - prom.started_at) / 60
    results = render(
        prom.client, out, minutes=minutes, step=prom.scrape_seconds, rate_interval="20s"
    )
    failed = [f"{r.title}: {'; '.join(r.errors)}" for r in results if r.errors]
    empty = [r.title for r in results if not r.series and not r.errors]
    timeline.say(f"  dashboard:            {out} ({len(results)} panels over {minutes:.1f} min)")
    if empty:
        timeline.say(f"    no data at the end: {', '.join(empty)}")
    for problem in failed:
        timeline.say(f"    [FAILED] {problem}")
    return not failed


def main(argv: list[str] | None = None) -> int:
    """Run the demo; the exit status says whether every expectation held."""
    parser = argparse.ArgumentParser(prog="python -m testbed.demo", description=__doc__)
    parser.add_argument(
        "--once",
        action="store_true",
        help="exit after the summary (0 only if every expectation held)",
    )
    parser.add_argument(
        "--dashboard",
        type=Path,
        metavar="PNG",
        help="scrape the run with Prometheus and draw the Grafana dashboard into PNG",
    )
    parser.add_argument(
        "--system-tier",
        action="store_true",
        help="elb-gate installed as shipped (helm install, the image of make image) on real "
        "kubelet nodes, called through the Service (root; README: the system tier)",
    )
    args = parser.parse_args(argv)
    if args.dashboard is not None and not PrometheusServer.available():
        parser.error("--dashboard needs the prometheus binary (make tools installs it)")
    if args.dashboard is not None and args.system_tier:
        parser.error("--dashboard scrapes the fast tier's processes: not with --system-tier")
    if args.system_tier and (why := unavailable()) is not None:
        parser.error(f"--system-tier cannot run here: {why}")

    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    root = Path(tempfile.mkdtemp(prefix="elb-gate-demo-"))
    cleanup = ExitStack()  # undone last first, every step even after one failed
    cleanup.callback(shutil.rmtree, root, ignore_errors=True)
    timeline = Timeline()
    prom: PrometheusServer | None = None
    verdict: int | None = None
    try:
        timeline.say("elb-gate demo: the whole system on a real Kubernetes control plane")
        timeline.say(RULE)
        system = start_system(root, timeline, system_tier=args.system_tier)
        cleanup.callback(system.stop)
        if args.dashboard is not None:
            assert system.rig is not None
            prom = PrometheusServer(scrape_targets(system.rig), root / "prometheus").start()
            cleanup.callback(prom.stop)
            prom.wait_for_scrapes(2)
            timeline.emit(
                "setup", f"Prometheus at {prom.url} scrapes every elb-gate process every 2s"
            )
        setup_seconds = timeline.elapsed()
        scenario = Scenario(system, timeline)
        cleanup.callback(scenario.shutdown)
        report = scenario.play()
        scenario.shutdown()
        lines, checks = summarize(report, system.replica_metrics(), system.settings, setup_seconds)
        timeline.say(RULE)
        timeline.say(f"Summary after {report.finished_at:.1f} s")
        for line in lines:
            timeline.say("  " + line)
        held = sum(c.ok for c in checks)
        timeline.say(f"  expectations:         {held} of {len(checks)} held")
        for check in checks:
            timeline.say(f"    [{'ok' if check.ok else 'FAILED'}] {check.what}: {check.detail}")
        verdict = 0 if held == len(checks) else 1
        if prom is not None and not draw_dashboard(prom, args.dashboard, timeline):
            verdict = 1
        if not args.once:
            for line in poke_instructions(system):
                timeline.say(line)
            threading.Event().wait()  # until Ctrl-C / SIGTERM
        return verdict
    except KeyboardInterrupt:
        timeline.say("\ninterrupted: stopping everything")
        return verdict if verdict is not None else 130
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cleanup.close()


if __name__ == "__main__":
    sys.exit(main())
