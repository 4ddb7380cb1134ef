"""``python -m tests.demo [--once]`` (``make run``): elb-gate end to end, no cluster needed.

Starts the API emulator, two webhook replicas and the controller, plays the story
(:mod:`tests.demo.scenario`) with a live timeline, prints the summary, then stays
up for poking until Ctrl-C. ``--once`` exits after the summary: status 0 only if
every expectation held. Child processes and temporary files are removed on every
way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from elbgate.names import LIVENESS_CONFIGMAP, lease_name
from tests.demo.cluster import (
    DASHBOARD_APPLY_USER,
    NAMESPACE,
    OPENAPI_SA,
    ROGUE_USER,
    Cluster,
    start_cluster,
)
from tests.demo.jobs import job, new_search_id, short
from tests.demo.scenario import Scenario
from tests.demo.summary import summarize
from tests.demo.timeline import Timeline

RULE = "─" * 78


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM ends the demo the way Ctrl-C does: through the cleanup below."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def poke_instructions(cluster: Cluster) -> list[str]:
    """How to look around while the demo stays up."""
    emu, root = cluster.emu, cluster.root
    search_id = new_search_id()
    manifest = root / "a-search-job.json"
    manifest.write_text(
        json.dumps(job("submit", f"elb-submit-{short(search_id)}", NAMESPACE, search_id))
    )
    hook = cluster.replicas[cluster.serving]
    admin = emu.kubeconfig("admin")
    return [
        RULE,
        "It stays up. In another terminal:",
        f"  export KUBECONFIG={admin}",
        f"  kubectl -n {NAMESPACE} get jobs,leases,configmaps,events",
        f"  kubectl -n {NAMESPACE} get lease {lease_name(NAMESPACE)} -o yaml",
        f"  kubectl -n {NAMESPACE} get configmap {LIVENESS_CONFIGMAP} -o jsonpath='{{.data}}'",
        f"  .venv/bin/elb-gate -n {NAMESPACE} census        # what the webhook would decide now",
        f"  kubectl --kubeconfig {emu.kubeconfig(ROGUE_USER)} create -f {manifest}"
        "   # Gate A says no",
        f"  curl -s {hook.metrics_url}/metrics | grep elb_gate_admission_requests_total",
        f"  curl -s {cluster.controller.url('/liveness')}",
        f"  curl -s {cluster.controller.url('/metrics')} | grep -E 'elb_gate_(in_use|leases_re)'",
        "Kubeconfigs (one per user; no RBAC in the emulator, identity is what matters):",
        *(f"  {user:<18} {path}" for user, path in _kubeconfigs(cluster)),
        "Ctrl-C stops everything and removes the temporary files.",
    ]


def _kubeconfigs(cluster: Cluster) -> list[tuple[str, str]]:
    users = ["admin", DASHBOARD_APPLY_USER, OPENAPI_SA, ROGUE_USER]
    return [(user, cluster.emu.kubeconfig(user)) for user in users]


def main(argv: list[str] | None = None) -> int:
    """Run the demo; the exit status says whether every expectation held."""
    parser = argparse.ArgumentParser(prog="python -m tests.demo", description=__doc__)
    parser.add_argument("--once", action="store_true",
                        help="exit after the summary (0 only if every expectation held)")  # fmt: skip
    args = parser.parse_args(argv)

    signal.signal(signal.SIGTERM, _interrupt)
    root = Path(tempfile.mkdtemp(prefix="elb-gate-demo-"))
    timeline = Timeline()
    cluster: Cluster | None = None
    scenario: Scenario | None = None
    verdict: int | None = None
    try:
        timeline.say("elb-gate demo: the whole system on the Kubernetes API emulator")
        timeline.say(RULE)
        cluster = start_cluster(root, timeline)
        scenario = Scenario(cluster, timeline)
        report = scenario.play()
        scenario.shutdown()
        metrics = {name: cluster.metrics(name) for name in cluster.replicas}
        lines, checks = summarize(report, metrics, cluster.settings)
        timeline.say(RULE)
        timeline.say(f"Summary after {report.finished_at:.1f} s")
        for line in lines:
            timeline.say("  " + line)
        held = sum(c.ok for c in checks)
        timeline.say(f"  expectations:         {held} of {len(checks)} held")
        for check in checks:
            timeline.say(f"    [{'ok' if check.ok else 'FAILED'}] {check.what}: {check.detail}")
        verdict = 0 if held == len(checks) else 1
        if not args.once:
            for line in poke_instructions(cluster):
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
        if scenario is not None:
            scenario.shutdown()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
