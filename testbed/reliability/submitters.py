"""The submitters that race in a schedule, one per submit path, and how each one dies.

* ``client``: elb-gate's own library (``SubmitLease`` + ``run_slot``, heartbeat on);
* ``cli``: the ``elb-gate submit`` CLI as a process, whose COMMAND creates the Jobs with
  kubectl (as ``elastic-blast submit`` would);
* ``dashboard``: the dashboard's path (:class:`~testbed.reliability.paths.DashboardPath`:
  its raw-HTTP Lease client from :mod:`testbed.clients`), always outside the cluster
  (a plain user);
* ``openapi``: the OpenAPI service's path (:class:`~testbed.reliability.paths.OpenApiPath`:
  its kubectl Lease client), in the cluster (a Pod's ServiceAccount token).

Each opens exactly one search (:mod:`testbed.reliability.jobs`) and may die on the way,
in one of the ways the holder-gone rule (docs/holder-gone.md) tells apart:

* ``pod_deleted``: its Pod is deleted (Terminating for its grace, then gone);
* ``pod_failed``: its container crashes in a ``restartPolicy: Never`` Pod (Failed);
* ``container_restarted``: its container crashes and is restarted in place;
* ``node_not_ready``: its Pod's Node stops reporting Ready;
* ``thread_died``: the submit thread dies while its Pod lives (nothing in the cluster
  changes: reclaimed only when the Lease expires);
* ``process_died``: a submitter outside the cluster dies (no stamp: expiry).

The dashboard and OpenAPI submitters may also misbehave on purpose (create a Job
before taking the Lease, skip their own count) so that only the server stands between
them and an over-admission.

A library submitter may also *stall* without dying: right after taking the Lease it
stops renewing (a paused process) and sleeps until its hold has certainly ended at
expiry, then wakes and carries on, and Gate A must refuse its next Job. Either a
dashboard submitter of the same schedule *takes the hold over* (``taken_over``): it
waits for the stall (a :class:`StallBoard`) and polls the Lease at the moment its client
sees the hold expire, which falls before the controller would clear it (the controller's
expiry margin is wider than the webhook's: :data:`~testbed.reliability.rig.CONTROLLER_ENV`);
or the staller goes last, once every other submitter of its schedule is done, and the
hold is *left alone* (``left_alone``) for the controller to clear at its expiry.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

from client import CoordinationError, SubmitLease, run_slot
from client.errors import SlotUnavailable
from elbgate.kube.api import ApiError, ApiUnavailable
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from testbed.clients import ClientError, DashboardLeaseClient, lease_name, parse_time
from testbed.component import host_env
from testbed.controlplane import REPO, ControlPlane, PodIdentity, kubectl_path
from testbed.holders import NODE_LABEL, crash, node_not_ready, past_the_second_of
from testbed.reliability.jobs import JobPlan, create_job, job_body
from testbed.reliability.paths import DashboardPath, OpenApiPath
from testbed.reliability.rig import CEILING, CONTROLLER_SKEW_SECONDS, SHARED_ENV

Protocol = Literal["client", "cli", "dashboard", "openapi"]
Stall = Literal["taken_over", "left_alone"]
CrashPoint = Literal["after_acquire", "mid_jobs", "after_jobs"]
PodDeath = Literal["pod_deleted", "pod_failed", "container_restarted", "node_not_ready"]
"""Deaths the cluster can prove (the controller reclaims before expiry)."""
Death = Literal[PodDeath, "thread_died", "process_died"]
POD_DEATHS: tuple[PodDeath, ...] = get_args(PodDeath)
POD_TTL_SECONDS = 120
"""Lease TTL of an in-cluster submitter: long (the OpenAPI service's kubectl steps take
seconds each on a busy machine), so that a provably dead one is freed by the dead-holder
path and never by expiry, however late in its submit it dies."""
DEAD_THREAD_TTL_SECONDS = 8
"""Lease TTL of an in-cluster submitter whose thread will die or stall: only expiry
frees it."""
PLAIN_TTL_SECONDS: dict[str, int] = {"client": 3, "dashboard": 3, "openapi": 5, "cli": 5}
"""Lease TTL of submitters without a pod stamp: 3-5 s, so a death is reclaimed by
expiry within seconds. The library and the CLI renew (heartbeat); the dashboard's raw
HTTP submit takes well under a second."""
POLL_SECONDS = 0.25
MAX_POLL_SECONDS: dict[str, float] = {"dashboard": 0.5, "openapi": 3.0}
"""The existing paths' busy/full retry interval grows to this (with jitter). The OpenAPI
service's dispatcher re-checks every 5 s; each of its polls is a kubectl process."""


CLI_HOLDER = re.compile(r" as (cli-[0-9a-f]{32}) ")
"""How ``elb-gate submit`` names its holder identity once it holds the slot."""


class Crash(Exception):
    """The submitter dies here (raised inside its own thread)."""


@dataclass(frozen=True)
class SubmitPlan:
    """What one submitter will do, drawn from the schedule's seed."""

    protocol: Protocol
    pod_identity: bool
    start_delay: float
    jobs: tuple[JobPlan, ...]
    """Jobs in creation order; the finalizer is last."""
    crash: CrashPoint | None
    death: Death | None
    intrude: bool
    """dashboard/openapi: first try to open the search without holding the Lease."""
    skip_count: bool
    """dashboard/openapi: do not count before creating; rely on the gate."""
    step_delay: float
    stall: Stall | None = None
    """client: stop renewing right after the first acquisition, wake once the hold has
    ended at expiry (taken over, or left alone for the controller), and carry on."""
    takes_over: bool = False
    """dashboard: wait for the schedule's stall and try the Lease as the hold expires."""

    @property
    def ttl(self) -> int:
        if not self.pod_identity:
            return PLAIN_TTL_SECONDS[self.protocol]
        quiet = self.death == "thread_died" or self.stall is not None
        return DEAD_THREAD_TTL_SECONDS if quiet else POD_TTL_SECONDS


class StallBoard:
    """Where a schedule's staller tells its taker which hold it stopped renewing, and
    learns when every other submitter is done."""

    def __init__(self, others: int) -> None:
        self.holder = ""
        self.posted = threading.Event()
        self.finished = threading.Event()
        """The staller is done (it may never have stalled: nothing to wait for)."""
        self.others_done = threading.Event()
        """Every submitter but the staller is done."""
        self._others = others
        self._lock = threading.Lock()
        if others <= 0:
            self.others_done.set()

    def post(self, holder: str) -> None:
        self.holder = holder
        self.posted.set()

    def done(self, staller: bool) -> None:
        if staller:
            self.finished.set()
            return
        with self._lock:
            self._others -= 1
            if self._others <= 0:
                self.others_done.set()


class Submitter:
    """One submitter thread (or CLI process) and what happened to it."""

    def __init__(
        self,
        cp: ControlPlane,
        namespace: str,
        plan: SubmitPlan,
        tag: str,
        workdir: Path,
        own_node: Callable[[], str],
        board: StallBoard,
        users: Callable[[], str],
    ) -> None:
        self.cp = cp
        self.board = board
        self.namespace = namespace
        self.plan = plan
        self.tag = tag
        self.workdir = workdir
        self.pod: PodIdentity | None
        """Whose ServiceAccount token it submits with (``None``: a plain user's)."""
        self.username, self.kubeconfig, self.token, self.pod = self._identity(users, own_node)
        self._poll = POLL_SECONDS
        self._jitter = random.Random(tag)
        job_id = f"{tag}-{uuid.uuid4().hex[:8]}"
        self.bodies = [job_body(namespace, job, job_id, f"db-{job_id}") for job in plan.jobs]
        """The search's Jobs in creation order."""
        self.created: set[str] = set()
        self.crashed = False
        self.died_at: datetime | None = None
        self.outcome = "pending"
        self.error = ""
        self.denials: Counter[int] = Counter()
        self.intrusions = 0
        self.intrusions_refused = 0
        self.intrusions_admitted: list[str] = []
        """Jobs created without holding the Lease (the judge says whether Gate A allowed
        it: the contract's holder is a user, so a sibling replica's hold admits it)."""
        self.holders: set[str] = set()
        """The holder identities this submitter acquired the Lease as (two submitters
        may share a user: the replicas of one Deployment share its ServiceAccount)."""
        self._deadline = 0.0
        self.trace: list[tuple[float, str]] = []
        """(monotonic time, what) of each step, for a failing schedule's report."""
        self._before_crash: Callable[[], None] = lambda: None
        """What dying stops first (the client's heartbeat), before the cluster sees it."""
        self.stalled_rv = 0
        """The Lease revision of the stalled hold's last write (0: never stalled)."""
        self.resumed_code: int | None = None
        """The answer to the stalled holder's first Job CREATE after it woke."""
        self.resumed_job = ""
        """That Job's name."""

    def _identity(
        self, users: Callable[[], str], own_node: Callable[[], str]
    ) -> tuple[str, str, str, PodIdentity | None]:
        """A plain user, or a Pod's ServiceAccount: (username, kubeconfig, token, pod)."""
        if not self.plan.pod_identity:
            name = users()
            return name, self.cp.kubeconfig(name), self.cp.token(name), None
        selector = None
        if self.plan.death == "node_not_ready":
            # A Node of its own: turning a shared node NotReady would take the webhook's
            # and the controller's Pods along.
            selector = {NODE_LABEL: own_node()}
        pod = self.cp.pod_identity(
            self.namespace,
            f"{self.plan.protocol}-submit",
            pod=f"{self.plan.protocol}-{self.tag}-{uuid.uuid4().hex[:4]}",
            node_selector=selector,
            restart_policy="Never" if self.plan.death == "pod_failed" else "Always",
        )
        return pod.username, pod.kubeconfig, pod.token, pod

    # -- running ---------------------------------------------------------------------------

    def run(self, deadline: float) -> None:
        """Thread target: submit until the search is in, the submitter died, or deadline."""
        self._deadline = deadline
        time.sleep(self.plan.start_delay)
        self.note("start")
        try:
            own = {"client": self._run_client, "cli": self._run_cli}  # else an existing path
            own.get(self.plan.protocol, self._run_path)()
            self.outcome = "ran" if len(self.created) == len(self.plan.jobs) else "gave_up"
        except Crash:
            self.outcome = "crashed"
        except Exception as exc:  # reported by the schedule, never swallowed
            self.outcome = "error"
            self.error = f"{exc.__class__.__name__}: {exc}"
        finally:
            self.board.done(self.plan.stall is not None)

    def note(self, what: str) -> None:
        self.trace.append((time.monotonic(), what))

    def _pause(self) -> None:
        """Wait before retrying after busy or full, backing off to the protocol's cap."""
        time.sleep(self._poll * self._jitter.uniform(0.7, 1.3))
        self._poll = min(self._poll * 1.5, MAX_POLL_SECONDS[self.plan.protocol])

    def _left(self) -> float:
        """Seconds until the schedule's deadline (0 once past it)."""
        return max(0.0, self._deadline - time.monotonic())

    # -- dying ----------------------------------------------------------------------------

    def _die(self) -> None:
        """Die as planned: from here on this submitter neither renews nor releases."""
        self._before_crash()
        death = self.plan.death
        pod = self.pod
        if death in ("pod_failed", "container_restarted"):
            # This death is meant to be provable: wait until the clock's second is past
            # the Lease's last renewal (testbed.holders.past_the_second_of).
            lease = self.cp.admin.find("leases", self.namespace, lease_name(self.namespace))
            renewed = parse_time(((lease or {}).get("spec") or {}).get("renewTime"))
            if renewed is not None:
                past_the_second_of(renewed)
        self.crashed = True
        self.died_at = datetime.now(UTC)
        self.note(f"dies: {death}")
        if pod is not None and death == "pod_deleted":
            self.cp.admin.delete("pods", self.namespace, pod.pod)
        elif pod is not None and death in ("pod_failed", "container_restarted"):
            crash(self.cp, pod)  # Never: the Pod fails; Always: restarted in place
        elif pod is not None and death == "node_not_ready":
            node_not_ready(self.cp, pod.node)
        raise Crash()

    # -- creating the search ----------------------------------------------------------------

    def _create_jobs(self, create: Callable[[Mapping[str, Any]], int]) -> str:
        """Create the search's missing Jobs in order: ``done``, ``full`` (Gate B or the
        database rule refused), ``lost`` (Gate A refused: the hold is gone) or ``retry``."""
        for body in self.bodies:
            name = body["metadata"]["name"]
            if name in self.created:
                continue
            if self.created and self.plan.crash == "mid_jobs":
                self._die()
            time.sleep(self.plan.step_delay)
            code = create(body)
            self.note(f"create {name}: {code}")
            if self.stalled_rv and self.resumed_code is None:  # the first since it woke
                self.resumed_code, self.resumed_job = code, name
            if code in (200, 201, 409):  # 409: AlreadyExists, ours from an earlier try
                self.created.add(name)
                continue
            self.denials[code] += 1
            return {429: "full", 403: "lost"}.get(code, "retry")
        if self.plan.crash == "after_jobs":
            self._die()
        return "done"

    # -- elb-gate's library ------------------------------------------------------------------

    def _env(self, wait: int) -> dict[str, str]:
        """The rig's settings with this submitter's TTL, waiting at most ``wait`` s for a
        slot and for capacity."""
        return {
            **SHARED_ENV,
            "BLAST_SUBMIT_LEASE_TTL_SECONDS": str(self.plan.ttl),
            "BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS": str(wait),
            "BLAST_CAPACITY_WAIT_MAX_SECONDS": str(wait),
        }

    def _run_client(self) -> None:
        settings = Settings.from_env(self._env(300))
        config = KubeConfig.load(self.kubeconfig)
        lease = SubmitLease(self.namespace, gate=settings.gate, config=config, source="client")
        self.holders.add(lease.holder)

        def die() -> None:
            # No more renewals, and run_slot's release on the way out dies with us.
            lease.stop_heartbeat()
            lease.release = lambda: False  # type: ignore[method-assign]

        self._before_crash = die
        if self.plan.stall == "left_alone":
            self.board.others_done.wait(self._left())
            self.note("the others are done")
        cancel = threading.Event()  # ends a wait for the slot at the schedule's deadline
        stopper = threading.Timer(self._left(), cancel.set)
        stopper.start()
        try:
            while self._left():
                result = "retry"
                try:
                    with run_slot(lease, settings.client, poll_seconds=POLL_SECONDS, cancel=cancel):
                        self.note("slot")
                        if self.plan.crash == "after_acquire":
                            self._die()
                        if self.plan.stall is not None and not self.stalled_rv:
                            self._stall(lease)
                        result = self._create_jobs(lambda body: self._client_create(lease, body))
                except SlotUnavailable:
                    return
                except CoordinationError:
                    pass  # tried again below
                if result == "done":
                    return
                time.sleep(POLL_SECONDS)
        finally:
            stopper.cancel()
            lease.close()

    def _stall(self, lease: SubmitLease) -> None:
        """Stop renewing the hold just taken and sleep until it has certainly ended (the
        controller's expiry, and 8 s more for a loaded machine), then wake to create Jobs."""
        lease.stop_heartbeat()
        view = lease.view
        self.stalled_rv = int(view.resource_version) if view is not None else -1
        self.board.post(lease.holder)
        self.note(f"stalls at Lease rv {self.stalled_rv}")
        time.sleep(self.plan.ttl + CONTROLLER_SKEW_SECONDS + 8.0)
        self.note("wakes")

    def _client_create(self, lease: SubmitLease, body: Mapping[str, Any]) -> int:
        try:
            lease.kube.run(partial(create_job, body=dict(body), namespace=self.namespace))
        except ApiError as exc:
            return exc.code
        except ApiUnavailable:
            return 0
        return 201

    # -- the elb-gate CLI --------------------------------------------------------------------

    def _cli_script(self, directory: Path) -> Path:
        kubectl = f"{kubectl_path()} --kubeconfig {self.kubeconfig} -n {self.namespace}"
        lines = ['echo $$ > "$D/pid"']  # killed with the CLI at the crash point
        wait = ': > "$D/crash_point"; sleep 60; exit 9'
        if self.plan.crash == "after_acquire":
            lines.append(wait)
        for i, body in enumerate(self.bodies):
            if body["metadata"]["name"] in self.created:
                continue
            job_file = directory / f"job{i}.json"
            job_file.write_text(json.dumps(body))
            lines.append(
                f'{kubectl} create -f {job_file} >/dev/null 2>>"$D/kubectl.err" || '
                f"{kubectl} get -f {job_file} >/dev/null 2>&1 || exit 3"
            )
            lines.append(f': > "$D/created{i}"')
            if i == 0 and self.plan.crash == "mid_jobs" and len(self.plan.jobs) > 1:
                lines.append(wait)
        if self.plan.crash == "after_jobs":
            lines.append(wait)
        script = directory / "submit.sh"
        script.write_text("set -u\n" + "\n".join(lines) + "\n")
        return script

    def _run_cli(self) -> None:
        attempt = 0
        while self._left():
            attempt += 1
            directory = self.workdir / f"{self.tag}-cli-{attempt}"
            directory.mkdir(parents=True)
            script = self._cli_script(directory)
            env = {
                **host_env(self.kubeconfig),
                # give up (exit code, not a hang) when the schedule's time is up
                **self._env(max(1, int(self._left()))),
                "KUBECACHEDIR": str(self.cp.state_dir / "kubectl-cache"),
                "D": str(directory),
            }
            command = [
                sys.executable, "-m", "client", "submit", "-n", self.namespace,
                "--source", "cli", "--poll-interval", str(POLL_SECONDS),
                "--exec-timeout", str(self.plan.ttl - 1), "--", "sh", str(script),
            ]  # fmt: skip
            with open(directory / "cli.err", "wb") as err:
                proc = subprocess.Popen(
                    command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err
                )
            try:
                code = self._watch_cli(proc, directory)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            self._collect_cli(directory)
            if code == 0 and len(self.created) == len(self.plan.jobs):
                return
            time.sleep(POLL_SECONDS)

    def _collect_cli(self, directory: Path) -> None:
        with suppress(OSError):
            self.holders.update(CLI_HOLDER.findall((directory / "cli.err").read_text()))
        for i, plan in enumerate(self.plan.jobs):
            if (directory / f"created{i}").exists():
                self.created.add(plan.name)

    def _watch_cli(self, proc: subprocess.Popen[bytes], directory: Path) -> int:
        """Wait for the CLI; at the crash point, SIGKILL it (and its COMMAND) while it
        holds the Lease, then let the cluster see the death."""
        while (code := proc.poll()) is None:
            if self.plan.crash is not None and (directory / "crash_point").exists():
                proc.kill()
                proc.wait(10)
                with suppress(OSError, ValueError):  # no pid file yet, or the group is gone
                    os.killpg(int((directory / "pid").read_text().strip()), signal.SIGKILL)
                self._collect_cli(directory)
                self._die()
            if time.monotonic() > self._deadline + 30:  # killed by the caller
                raise TimeoutError("elb-gate submit did not finish")
            time.sleep(0.02)
        return code

    # -- the existing submit paths (dashboard: raw HTTP, OpenAPI: kubectl) --------------------

    def _run_path(self) -> None:
        path: DashboardPath | OpenApiPath = (
            DashboardPath(self.cp, self.token, self.namespace, ttl=self.plan.ttl)
            if self.plan.protocol == "dashboard"
            else OpenApiPath(self.cp, self.kubeconfig, self.namespace, ttl=self.plan.ttl)
        )
        self.holders.add(path.lease.holder)
        if self.plan.takes_over:
            self._await_stall(path)
        if self.plan.intrude:
            # Open the search without the Lease: Gate A must refuse (403).
            self.intrusions += 1
            code = path.create_job(self.bodies[0])
            self.note(f"intrusion: {code}")
            if code in (200, 201):
                self.created.add(self.plan.jobs[0].name)
                self.intrusions_admitted.append(self.plan.jobs[0].name)
            elif code == 403:
                self.intrusions_refused += 1
        while self._left():
            try:
                outcome: str = path.lease.acquire()
            except ClientError as exc:
                outcome = f"acquire failed: {exc}"
            if outcome not in ("acquired", "renewed"):
                self.note(outcome)
                self._pause()
                continue
            self.note("acquired")
            self._poll = POLL_SECONDS
            if self.plan.crash == "after_acquire":
                self._die()
            full = not self.created and not self.plan.skip_count and path.count() >= CEILING
            result = "full" if full else self._create_jobs(path.create_job)
            try:
                path.lease.release()
            except ClientError as exc:  # the Lease expires on its own
                self.note(f"release failed: {exc}")
            self.note(f"released after {result}")
            if result == "done":
                return
            self._pause()

    def _await_stall(self, path: DashboardPath | OpenApiPath) -> None:
        """Wait for the schedule's staller to stall, then until its hold expires on this
        client's own clock (its poll would find it then): the next acquire takes it over."""
        board = self.board
        while not board.posted.is_set() and not board.finished.is_set() and self._left():
            board.posted.wait(0.1)
        if not board.posted.is_set():
            self.note("no stall to take over")
            return
        client = path.lease
        assert isinstance(client, DashboardLeaseClient)
        status, stored = client.get()
        if status != 200 or (stored.get("spec") or {}).get("holderIdentity") != board.holder:
            self.note("the stalled hold ended before this taker's poll")
            return
        # The staller renews no more: what was read stands until its hold expires.
        while self._left() and not client.sees_expired(stored):
            time.sleep(0.02)
        self.note("polls as the stalled hold expires")
