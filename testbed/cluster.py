"""``python -m testbed.cluster --dir DIR``: start a control plane and keep it up.

Tests reuse it with ``ELB_GATE_CONTROL_PLANE=DIR`` (no start-up per run)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from testbed.controlplane import ControlPlane


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.cluster", description=__doc__)
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(".run/cluster"),
        help="state directory (kubeconfigs, logs, state.json)",
    )
    args = parser.parse_args(argv)
    print("starting the control plane…", flush=True)
    cp = ControlPlane.start(args.dir.resolve())
    print(f"Kubernetes {cp.kubernetes_version} at {cp.server}, ready in {cp.startup_seconds:.1f}s")
    print(f"  kubectl:  KUBECONFIG={cp.kubeconfig('admin')} kubectl get nodes")
    print(f"  tests:    ELB_GATE_CONTROL_PLANE={args.dir} make test")
    print("Ctrl-C stops it.", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1):
            if cp.process is not None and cp.process.poll() is not None:
                print("the control plane exited; see", args.dir / "localkube.log", file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        cp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
