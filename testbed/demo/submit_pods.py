"""Plays the container of each ``submit-jobs`` pod: it creates the search's batch Jobs.

On AKS the ``submit-jobs`` Job's pod (cloud job submission) creates the search's
``app=blast`` Jobs from inside the cluster, as the namespace's ``default`` service
account, holding no Lease: elb-gate admits them because their ``elb-job-id`` is already
active. Here, once such a pod is Running, its batch Jobs are created with a token of
that service account bound to that pod (the real TokenRequest API), so the webhook sees
exactly the identity the real pod would present.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elbgate.names import APP_LABEL, JOB_ID_LABEL, SUBMIT_APP
from testbed.api import ApiError, JsonObj
from testbed.controlplane import ControlPlane
from testbed.demo.searches import batch_jobs
from testbed.watch import Watch


@dataclass
class SubmitPods:
    """Watches the namespace's submit pods and does their work once each is Running (in
    the watch's thread: a few calls per pod, and stopping the watch waits for them)."""

    cp: ControlPlane
    namespace: str
    created: int = 0
    """Batch Jobs created."""
    errors: list[str] = field(default_factory=list)
    _done: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._watch = Watch(
            self.cp.admin,
            "pods",
            self._on_pod,
            namespace=self.namespace,
            label_selector=f"{APP_LABEL}={SUBMIT_APP}",
        )

    def start(self) -> None:
        self._watch.start()

    def stop(self) -> None:
        self._watch.stop()

    def _on_pod(self, kind: str, pod: JsonObj) -> None:
        meta = pod["metadata"]
        running = (pod.get("status") or {}).get("phase") == "Running"
        if kind == "DELETED" or not running or meta["uid"] in self._done:
            return
        self._done.add(meta["uid"])
        try:
            as_pod = self.cp.api_for_token(self.cp.pod_token(pod))
            for body in batch_jobs(str(meta["labels"][JOB_ID_LABEL]), self.namespace):
                as_pod.create(body)
                self.created += 1
        except (ApiError, OSError, KeyError) as exc:
            self.errors.append(f"{meta['name']}: {exc}")
