"""A stand-in for ``elastic-blast submit`` (cloud job submission): creates one search's
Jobs with kubectl, as whoever ``KUBECONFIG`` names.

    python -m testbed.demo.elastic_blast --namespace blast --id <elb-job-id> [--no-batch-work]

First the ``submit-jobs`` Job (one ``kubectl create -f -``), then, if it was admitted,
the finalizer (a second one). A refused Job stops the submit there with kubectl's own
message on stderr and exit status 1: Gate A and Gate B act on the first Job, so a refused
search leaves nothing behind. ``--no-batch-work`` creates only the finalizer: a search
whose batch work never appears (its finalizer becomes an orphan).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from testbed.demo.searches import search_manifests

Create = Callable[[str], "subprocess.CompletedProcess[str]"]
"""Runs ``kubectl create -f -`` with the given manifest on stdin."""


def create_in_order(manifests: Sequence[dict[str, Any]], create: Create) -> tuple[bool, str]:
    """Create each Job in order, stopping at the first refusal. Returns (all created,
    kubectl's output or its error text)."""
    printed = []
    for manifest in manifests:
        made = create(json.dumps(manifest))
        if made.returncode != 0:
            return False, made.stderr.strip()
        printed.append(made.stdout.strip())
    return True, "\n".join(printed)


def main(argv: list[str] | None = None) -> int:
    """Create the search's Jobs; exit 1 with kubectl's message if one is refused."""
    parser = argparse.ArgumentParser(prog="elastic-blast-stand-in")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--id", required=True, help="elb-job-id of this search")
    parser.add_argument(
        "--no-batch-work",
        action="store_true",
        help="create only the finalizer: batch work that never appears (an orphan)",
    )
    args = parser.parse_args(argv)
    manifests = search_manifests(args.namespace, args.id, batch_work=not args.no_batch_work)
    kubectl = [os.environ.get("KUBECTL", "kubectl"), "create", "-f", "-"]  # as $KUBECONFIG's user
    ok, output = create_in_order(
        manifests,
        lambda body: subprocess.run(
            kubectl, input=body, capture_output=True, text=True, check=False
        ),
    )
    (sys.stdout if ok else sys.stderr).write(output + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
