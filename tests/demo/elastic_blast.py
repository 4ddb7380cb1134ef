"""A stand-in for ``elastic-blast submit``: creates one search's Jobs with kubectl.

    python -m tests.demo.elastic_blast --namespace blast --id <elb-job-id> [--blasts 2]

The search's first Job is one ``kubectl create -f -``, and the rest (batch Jobs,
then the finalizer, in that order) a second one, as whoever ``KUBECONFIG`` names.
A refused first Job stops the submit there with kubectl's own message on stderr
(exit status 1): that is where Gate A and Gate B act, so a refused search leaves
nothing behind. (Two kubectl runs rather than one per Job keep a burst of ten
submits cheap on a two-core laptop; the order the webhook sees is the same.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tests.demo.jobs import search_jobs

Create = Callable[[str], "subprocess.CompletedProcess[str]"]
"""Runs ``kubectl create -f -`` with the given manifest (a Job or a List) on stdin."""


def create_jobs(manifests: Sequence[dict[str, Any]], create: Create) -> tuple[bool, str]:
    """Create the first Job, then (if it was admitted) the others in order. Returns
    (all created, kubectl's output, or its error text)."""
    # The rest as a stream of JSON documents (kubectl creates them in order); not a
    # v1 List, whose client-side validation the API emulator cannot answer.
    steps = [json.dumps(manifests[0])]
    if len(manifests) > 1:
        steps.append("\n".join(json.dumps(m) for m in manifests[1:]))
    printed = []
    for step in steps:
        made = create(step)
        if made.returncode != 0:
            return False, made.stderr.strip()
        printed.append(made.stdout.strip())
    return True, "\n".join(printed)


def kubectl_create(kubectl: str = "kubectl") -> Create:
    """``kubectl create -f -`` as whoever ``$KUBECONFIG`` names."""

    def create(manifest: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [kubectl, "create", "-f", "-"], input=manifest, capture_output=True, text=True,
            check=False,
        )  # fmt: skip

    return create


def main(argv: list[str] | None = None) -> int:
    """Create the search's Jobs; exit 1 with kubectl's message if one is refused."""
    parser = argparse.ArgumentParser(prog="elastic-blast-stub")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--id", required=True, help="elb-job-id of this search")
    parser.add_argument("--blasts", type=int, default=2, help="number of app=blast Jobs")
    parser.add_argument(
        "--no-batch-work",
        action="store_true",
        help="create only the finalizer: batch work that never appears (an orphan)",
    )
    args = parser.parse_args(argv)
    manifests = search_jobs(args.namespace, args.id, args.blasts, batch_work=not args.no_batch_work)
    ok, output = create_jobs(manifests, kubectl_create(os.environ.get("KUBECTL", "kubectl")))
    (sys.stdout if ok else sys.stderr).write(output + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
