"""One emulated cluster with elb-gate installed, shared by every schedule of a module.

The API emulator, TWO real ``python -m webhook`` replicas behind the one Service
``elb-system/elb-gate-webhook``, and one or two real ``python -m controller``.

How both replicas are exercised: the emulator resolves a Service to one address
(``emu.services[(ns, name)]``), read afresh on every admission call. :class:`Endpoints`
plays the endpoints controller and kube-proxy: it re-points that entry at the next
*ready* replica every few milliseconds (round robin), and drops a replica whose
``/readyz`` fails or whose process is gone, as a Service's endpoints do. Both
replicas' certificates are issued by their own CA, so the configurations carry both
CAs in one ``caBundle`` (PEM concatenation, as a CA rotation does).
"""

from __future__ import annotations

import base64
import functools
import itertools
import shutil
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from elbgate.names import lease_name
from tests.kube_emulator import Emulator, User
from tests.kube_emulator import admission as emulator_admission
from tests.support.controller_process import ControllerProcess
from tests.support.webhook_process import SERVICE, WebhookProcess, load_configurations

SHARED_ENV: dict[str, str] = {
    "BLAST_MAX_RUN_CONCURRENCY": "2",
    "BLAST_SUBMIT_LEASE_TTL_SECONDS": "5",
    "BLAST_LEASE_CLOCK_SKEW_SECONDS": "1",
    "ELB_GATE_LEASE_MIN_DURATION_SECONDS": "1",
    "ELB_GATE_RECLAIM_GRACE_SECONDS": "1",
    "ELB_GATE_API_TIMEOUT_SECONDS": "2",
    "CELERY_TASK_SOFT_TIME_LIMIT": "3300",
    "CELERY_TASK_TIME_LIMIT": "3600",
}
"""Settings every component of the rig shares: ceiling 2 (more contention than 3), a
5 s Lease TTL with 1 s skew (a crashed holder without a pod stamp is reclaimed within
~6 s), a 1 s dead-holder grace, and a 2 s API deadline inside the 5 s webhook timeout."""

CEILING = int(SHARED_ENV["BLAST_MAX_RUN_CONCURRENCY"])
TTL_SECONDS = int(SHARED_ENV["BLAST_SUBMIT_LEASE_TTL_SECONDS"])
SKEW_SECONDS = int(SHARED_ENV["BLAST_LEASE_CLOCK_SKEW_SECONDS"])
API_TIMEOUT_SECONDS = float(SHARED_ENV["ELB_GATE_API_TIMEOUT_SECONDS"])

_serial = itertools.count(1)
_users_lock = threading.Lock()


class _CachedContexts:
    """``ssl`` as the emulator's admission module sees it, with contexts cached.

    Why: ``AdmissionChain._call`` runs ``ssl.create_default_context()`` (loading the
    system CA store, ~65 ms of CPU under the GIL) on *every* webhook call, before it
    builds the caBundle context it actually uses. With two webhook calls per Lease
    write that caps the emulator near 7 admissions/s on a core and makes every
    schedule crawl. The contexts it builds are never modified after creation, so one
    per distinct caBundle is equivalent. Reported as an emulator bug; this shim only
    touches the emulator's admission module, nothing else in the process.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(ssl, name)

    @staticmethod
    @functools.lru_cache(maxsize=32)
    def create_default_context(
        purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH,
        *,
        cafile: str | None = None,
        capath: str | None = None,
        cadata: str | bytes | None = None,
    ) -> ssl.SSLContext:
        return ssl.create_default_context(purpose, cafile=cafile, capath=capath, cadata=cadata)


def speed_up_emulator_admission() -> None:
    """Install :class:`_CachedContexts` in the emulator's admission module (idempotent)."""
    emulator_admission.ssl = _CachedContexts()  # type: ignore[assignment]


def register_configurations(emu: Emulator, hooks: Iterable[WebhookProcess]) -> None:
    """Store the manifest's webhook configurations with every replica's CA in caBundle."""
    bundle = base64.b64encode(b"".join(h.certificate.ca_pem for h in hooks)).decode()
    for doc in load_configurations(bundle):
        resource = doc["kind"].lower() + "s"
        existing = emu.find(resource, None, doc["metadata"]["name"])
        if existing is None:
            emu.create(doc)
        else:
            doc["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            emu.update(doc)


def _ready(hook: WebhookProcess) -> bool:
    proc = hook.process
    if proc is None or proc.poll() is not None:
        return False
    try:
        with urllib.request.urlopen(f"{hook.metrics_url}/readyz", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class Endpoints:
    """The Service's endpoints: alternate between ready replicas, drop unready ones."""

    def __init__(
        self,
        emu: Emulator,
        hooks: list[WebhookProcess],
        period: float = 0.015,
        probe_period: float = 0.25,
    ) -> None:
        self.emu = emu
        self.hooks = hooks
        self.period = period
        self.probe_period = probe_period
        self.ready = [False] * len(hooks)
        self.routed = [0] * len(hooks)
        """How many times each replica was made the Service's target."""
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._probe_loop, name="endpoints-probe", daemon=True),
            threading.Thread(target=self._route_loop, name="endpoints-route", daemon=True),
        ]

    def start(self) -> Endpoints:
        self.probe_now()
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def probe_now(self) -> None:
        """Probe every replica's /readyz once (the readiness probe)."""
        for i, hook in enumerate(self.hooks):
            self.ready[i] = _ready(hook)

    def mark_unready(self, index: int) -> None:
        """Take a replica out at once (a pod being deleted leaves the endpoints first)."""
        self.ready[index] = False

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.probe_period):
            self.probe_now()

    def _route_loop(self) -> None:
        turn = itertools.count()
        while not self._stop.wait(self.period):
            live = [i for i, ok in enumerate(self.ready) if ok and self.hooks[i].process]
            if not live:
                self.emu.services.pop(SERVICE, None)
                continue
            i = live[next(turn) % len(live)]
            self.emu.services[SERVICE] = ("127.0.0.1", self.hooks[i].port)
            self.routed[i] += 1


class Rig:
    """Emulator + two webhook replicas + controller(s), started once per module."""

    def __init__(
        self,
        namespaces: Iterable[str],
        *,
        controllers: int = 1,
        env: Mapping[str, str] | None = None,
        controller_env: Mapping[str, str] | None = None,
        resync_seconds: float = 1.0,
        users: Iterable[User] = (),
    ) -> None:
        self.namespaces = list(namespaces)
        self.env = {**SHARED_ENV, **(env or {})}
        self.controller_env = {**self.env, **(controller_env or {})}
        self.controller_count = controllers
        self.resync_seconds = resync_seconds
        self.emu = Emulator(users=list(users))
        self.hooks: list[WebhookProcess] = []
        self.controllers: list[ControllerProcess] = []
        self.endpoints: Endpoints | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Rig:
        speed_up_emulator_admission()
        self.emu.start()
        try:
            self.hooks = [WebhookProcess(self.emu, self.env, register=False) for _ in range(2)]
            for hook in self.hooks:
                hook.start()
            register_configurations(self.emu, self.hooks)
            self.endpoints = Endpoints(self.emu, self.hooks).start()
            for ns in self.namespaces:
                self.hooks[0].gate_namespace(ns)
            for i in range(self.controller_count):
                self.start_controller(i)
        except BaseException:
            self.stop()
            raise
        return self

    def start_controller(self, index: int) -> ControllerProcess:
        """Start controller replica ``index`` (replacing a stopped one)."""
        ctl = ControllerProcess.start(
            self.emu,
            name=f"ctl-{index}",
            namespaces=self.namespaces,
            resync_seconds=self.resync_seconds,
            # client-go's proportions (15/10/2), scaled down: a noisy machine must not
            # cost the leader its Lease every few seconds.
            leader_lease_seconds=6.0,
            leader_renew_seconds=1.0,
            env=self.controller_env,
        )
        if index < len(self.controllers):
            self.controllers[index] = ctl
        else:
            self.controllers.append(ctl)
        return ctl

    def stop(self) -> None:
        if self.endpoints is not None:
            self.endpoints.stop()
        for ctl in self.controllers:
            ctl.stop()
        for hook in self.hooks:
            hook.stop()
        self.emu.stop()
        shutil.rmtree(self.emu.state_dir, ignore_errors=True)

    def __enter__(self) -> Rig:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- waiting -------------------------------------------------------------------------

    def wait_for_leader(self, timeout: float = 60.0) -> ControllerProcess:
        """The controller replica that leads, once one does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ctl in self.controllers:
                if ctl.alive and ctl.is_leader():
                    return ctl
            time.sleep(0.1)
        raise AssertionError(f"no controller became leader within {timeout:g}s")

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Both replicas routable and a controller leading."""
        deadline = time.monotonic() + timeout
        assert self.endpoints is not None
        while not all(self.endpoints.ready):
            if time.monotonic() > deadline:
                raise AssertionError("webhook replicas not ready")
            time.sleep(0.05)
        self.wait_for_leader(max(1.0, deadline - time.monotonic()))

    # -- identities ----------------------------------------------------------------------

    def add_user(self, user: User) -> User:
        """Register ``user`` with the emulator, safely while it serves.

        ``Emulator.add_user`` rebuilds the token map with ``clear()`` + ``update()`` from
        the caller's thread: a request authenticated meanwhile gets 401, and two threads
        adding users at once crash with "dictionary changed size during iteration".
        Schedules add users while others run, so this adds the one entry under a lock
        (two atomic dict insertions) instead. Reported as an emulator bug.
        """
        with _users_lock:
            self.emu.users[user.name] = user
            self.emu._state.users[user.token] = user
        return user

    def plain_user(self, prefix: str = "user") -> User:
        """A fresh person-like user (no pod stamp: a crash is reclaimed by TTL)."""
        return self.add_user(User.plain(f"{prefix}-{next(_serial)}", groups=["team"]))

    def pod_user(self, namespace: str, prefix: str = "sa") -> tuple[User, str]:
        """A fresh service account with a bound token from a Pod that exists (so the
        webhook stamps ``holder-pod`` and deleting the Pod kills the holder)."""
        n = next(_serial)
        pod = self.emu.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{prefix}-pod-{n}", "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "submit:1"}]},
            }
        )
        user = User.service_account(
            namespace, f"{prefix}-{n}", pod=pod["metadata"]["name"], pod_uid=pod["metadata"]["uid"]
        )
        return self.add_user(user), pod["metadata"]["name"]

    # -- namespaces ----------------------------------------------------------------------

    def reset_namespace(self, namespace: str) -> None:
        """Empty a namespace for the next schedule: Jobs, its Lease, Pods and Events go."""
        for resource in ("jobs", "pods", "events"):
            for obj in self.emu.list(resource, namespace):
                if self.emu.find(resource, namespace, obj["metadata"]["name"]) is not None:
                    self.emu.delete(resource, namespace, obj["metadata"]["name"])
        if self.emu.find("leases", namespace, lease_name(namespace)) is not None:
            self.emu.delete("leases", namespace, lease_name(namespace))

    # -- observation ---------------------------------------------------------------------

    def admissions_served(self) -> list[int]:
        """Admission requests each webhook replica answered (from its /metrics)."""
        out = []
        for hook in self.hooks:
            total = 0.0
            try:
                text = hook.metrics() if hook.process is not None else ""
            except OSError:
                text = ""
            for line in text.splitlines():
                if line.startswith("elb_gate_admission_requests_total{"):
                    total += float(line.rsplit(" ", 1)[1])
            out.append(int(total))
        return out


def job_body(
    namespace: str, name: str, app: str, job_id: str, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A batch/v1 Job of one search, shaped as elastic-blast writes it."""
    labels = {"app": app, "elb-job-id": job_id}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": app, "image": "ncbi/elasticblast-job-submit:4.0.0"}],
                },
            },
        },
    }
