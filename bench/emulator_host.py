"""The API emulator in a process of its own, filled with Jobs without going through HTTP.

``python -m bench.emulator_host --state-dir D [--cpu 1]`` starts
:class:`tests.kube_emulator.Emulator` (users: admin and the webhook's service
account), prints ``serving URL`` then ``ready``, and then obeys one command per
stdin line:

* ``grow NS N [HOLDER]`` — make namespace ``NS`` hold the first ``N`` Jobs of
  :func:`bench.namespace_jobs.planned_jobs` (and its submit Lease, held by
  ``HOLDER``); answers ``ok N SECONDS``.

Why not the emulator's own CLI and POSTs: the emulator's write path costs time
proportional to everything stored, so creating 3,000 Jobs over HTTP takes over
a minute; written straight into its store (``Emulator.create``, which keeps the
given status) they take about two seconds. Reads — what is measured — still go
over HTTPS.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.namespace_jobs import job_body, job_status, planned_jobs, submit_lease
from tests.kube_emulator import Emulator, User
from tests.support.webhook_process import SERVICE, WEBHOOK_USER

STARTED = "2026-01-05T10:00:00Z"


def grow(emu: Emulator, namespace: str, total: int, holder: str) -> int:
    """Bring ``namespace`` up to ``total`` planned Jobs; returns how many it holds."""
    if emu.find("namespaces", None, namespace) is None:
        emu.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    lease = submit_lease(namespace, holder, datetime.now(UTC))
    if emu.find("leases", namespace, lease["metadata"]["name"]) is None:
        emu.create(lease)
    have = len(emu.list("jobs", namespace))
    for job in planned_jobs(total)[have:]:
        body = job_body(namespace, job.name, job.app, job.job_id)
        body["status"] = job_status(job.state, STARTED)
        emu.create(body)
    return len(emu.list("jobs", namespace))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.emulator_host")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})  # before the server thread starts: it inherits
    emu = Emulator([User.service_account(*SERVICE)], state_dir=args.state_dir).start()
    for user in ("admin", WEBHOOK_USER):
        emu.kubeconfig(user)
    print(f"serving {emu.url}", flush=True)
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["grow"] and len(words) in (3, 4):
            started = time.perf_counter()
            holder = words[3] if len(words) == 4 else "alice"
            count = grow(emu, words[1], int(words[2]), holder)
            print(f"ok {count} {time.perf_counter() - started:.3f}", flush=True)
        elif words:
            print(f"error unknown command {line.strip()!r}", flush=True)
    emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
