"""Plays the container of each ``submit-jobs`` pod: it creates the search's batch Jobs.

On AKS the ``submit-jobs`` Job's pod (cloud job submission) creates the search's
``app=blast`` Jobs from inside the cluster, as the namespace's ``default`` service
account, holding no Lease: elb-gate admits them because their ``elb-job-id`` is already
active. Here, once such a pod is Running, its batch Jobs are created with a token of
that service account bound to that pod (the real TokenRequest API), so the webhook sees
exactly the identity the real pod would present.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from elbgate.names import APP_LABEL, JOB_ID_LABEL, SUBMIT_APP
from testbed.api import ApiError, JsonObj
from testbed.controlplane import ControlPlane
from testbed.demo.searches import batch_jobs
from testbed.watch import Watch


@dataclass
class SubmitPods:
    """Watches the namespace's submit pods and does their work once each is Running."""

    cp: ControlPlane
    namespace: str
    created: int = 0
    """Batch Jobs created."""
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._todo: queue.Queue[JsonObj | None] = queue.Queue()
        self._done: set[str] = set()
        self._watch = Watch(
            self.cp.admin,
            "pods",
            self._on_pod,
            namespace=self.namespace,
            label_selector=f"{APP_LABEL}={SUBMIT_APP}",
        )
        self._worker = threading.Thread(target=self._work, name="submit-pods", daemon=True)

    def start(self) -> SubmitPods:
        self._worker.start()
        self._watch.start()
        return self

    def stop(self) -> None:
        self._watch.stop()
        self._todo.put(None)
        if self._worker.is_alive():
            self._worker.join(10)

    def _on_pod(self, kind: str, pod: JsonObj) -> None:
        uid = pod["metadata"].get("uid", "")
        running = (pod.get("status") or {}).get("phase") == "Running"
        if kind != "DELETED" and running and uid not in self._done:
            self._done.add(uid)
            self._todo.put(pod)

    def _work(self) -> None:
        while (pod := self._todo.get()) is not None:
            try:
                self._create_batch_work(pod)
            except (ApiError, OSError, KeyError) as exc:
                self.errors.append(f"{pod['metadata']['name']}: {exc}")

    def _create_batch_work(self, pod: JsonObj) -> None:
        job_id = str((pod["metadata"].get("labels") or {}).get(JOB_ID_LABEL) or "")
        as_pod = self.cp.api_for_token(self.cp.pod_token(pod))
        for body in batch_jobs(job_id, self.namespace):
            as_pod.create(body)
            self.created += 1
