"""The submitters that race in a schedule, one per client protocol.

* ``client``: elb-gate's own library (``SubmitLease`` + ``run_slot``, heartbeat on);
* ``cli``: the ``elb-gate submit`` CLI as a process, whose COMMAND creates the Jobs with
  kubectl (as ``elastic-blast submit`` would);
* ``raw``: the in-cluster OpenAPI path: GET / POST / PUT-with-resourceVersion over
  HTTPS, 409 = busy, full-object PUTs that drop annotations;
* ``kubectl``: the dashboard path: ``kubectl get/create/replace -o json``.

Each opens exactly one search (its Jobs in elastic-blast's order, the finalizer last)
and may crash on the way: an in-process client stops renewing and abandons the Lease;
the CLI is killed with SIGKILL while holding it. A crash of a submitter with a pod
identity deletes its Pod (the dead-holder path); without one, only the TTL frees it.
The raw and kubectl submitters may also misbehave on purpose (create a Job before
taking the Lease, skip the census) so that only the server stands between them and
an over-admission.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from elbgate.census import census
from elbgate.client import CoordinationError, SubmitLease, run_slot
from elbgate.client.errors import SlotUnavailable
from elbgate.client.lease_ops import claimed_body, new_lease_body, released_body
from elbgate.kube.api import JOBS, ApiError, ApiUnavailable, path
from elbgate.kube.config import KubeConfig
from elbgate.lease import LeaseView, is_expired
from elbgate.names import SEARCH_JOB_SELECTOR, lease_name
from elbgate.settings import Settings
from tests.kube_emulator.fixtures import KUBECTL
from tests.reliability.cluster import CEILING, SHARED_ENV, Rig, job_body
from tests.reliability.observer import SUBMITTER_ANNOTATION

Protocol = Literal["client", "cli", "raw", "kubectl"]
CrashPoint = Literal["after_acquire", "mid_jobs", "after_jobs"]
POD_TTL_SECONDS = 20
"""Lease TTL of pod-identity submitters: long, so only the dead-holder path can free
their Lease quickly after a crash (and a takeover cannot beat the controller)."""
PLAIN_TTL_SECONDS: dict[str, int] = {"client": 3, "raw": 3, "kubectl": 5, "cli": 5}
"""Lease TTL of submitters without a pod stamp: 3-5 s, so a crash is reclaimed by
expiry within seconds. kubectl and the CLI spawn processes per step, so they get 5 s
(the CLI's exec timeout is TTL - 1)."""
POLL_SECONDS = 0.25
MAX_POLL_SECONDS: dict[str, float] = {"client": 0.25, "raw": 0.5, "kubectl": 1.5, "cli": 0.25}
"""Busy/full retry interval grows to this (with jitter): a kubectl poll is a process."""
REPO = Path(__file__).resolve().parents[2]


class Crash(Exception):
    """The submitter dies here (raised inside its own thread)."""


@dataclass(frozen=True)
class SubmitPlan:
    """What one submitter will do, drawn from the schedule's seed."""

    protocol: Protocol
    pod_identity: bool
    start_delay: float
    apps: tuple[str, ...]
    """Jobs in creation order; the finalizer is last."""
    crash: CrashPoint | None
    intrude: bool
    """raw/kubectl: first try to open the search without holding the Lease."""
    skip_census: bool
    """raw/kubectl: do not count before creating; rely on the gate."""
    step_delay: float


class Submitter:
    """One submitter thread (or CLI process) and what happened to it."""

    def __init__(self, rig: Rig, namespace: str, plan: SubmitPlan, tag: str, workdir: Path) -> None:
        self.rig = rig
        self.namespace = namespace
        self.plan = plan
        self.tag = tag
        self.workdir = workdir
        self.pod = ""
        if plan.pod_identity:
            user, self.pod = rig.pod_user(namespace, prefix=f"{plan.protocol}")
        else:
            user = rig.plain_user(prefix=plan.protocol)
        self.user = user
        self.username = user.username
        self.kube_user = user.name
        self.ttl = POD_TTL_SECONDS if plan.pod_identity else PLAIN_TTL_SECONDS[plan.protocol]
        self._poll = POLL_SECONDS
        self._jitter = random.Random(tag)
        self.job_id = f"{tag}-{uuid.uuid4().hex[:8]}"
        self.job_names = [f"{tag}-{i}-{app}" for i, app in enumerate(plan.apps)]
        self.created: set[str] = set()
        self.crashed = False
        self.crashed_at: datetime | None = None
        self.outcome = "pending"
        self.error = ""
        self.denials: Counter[int] = Counter()
        self.intrusions = 0
        self.intrusions_refused = 0
        self._believing = False
        self._cli_dir: Path | None = None
        self._deadline = 0.0
        self.trace: list[tuple[float, str]] = []
        """(monotonic time, what) of each step, for a failing schedule's report."""
        self._before_crash: Callable[[], None] = lambda: None
        """What dying stops first (the client's heartbeat), before its Pod goes."""

    # -- what the observer asks ----------------------------------------------------------

    def believes_holding(self) -> bool:
        """True while this submitter acts as the Lease holder."""
        if self.crashed:
            return False
        if self.plan.protocol == "cli":
            # COMMAND runs (holding the slot) from its start marker until it exits; the CLI
            # releases only after it has reaped COMMAND (also after an exec timeout).
            d = self._cli_dir
            if d is None or not (d / "start").exists() or (d / "end").exists():
                return False
            try:
                os.kill(int((d / "pid").read_text()), 0)
            except (OSError, ValueError):
                return False
            return True
        return self._believing

    # -- running ---------------------------------------------------------------------------

    def run(self, deadline: float) -> None:
        """Thread target: submit until the search is in, the submitter crashed, or deadline."""
        self._deadline = deadline
        time.sleep(self.plan.start_delay)
        self.note("start")
        try:
            {
                "client": self._run_client,
                "cli": self._run_cli,
                "raw": self._run_protocol,
                "kubectl": self._run_protocol,
            }[self.plan.protocol]()
            if self.outcome == "pending":
                self.outcome = "ran" if len(self.created) == len(self.job_names) else "gave_up"
        except Crash:
            self.outcome = "crashed"
        except Exception as exc:  # reported by the schedule, never swallowed
            self.outcome = "error"
            self.error = f"{exc.__class__.__name__}: {exc}"
        finally:
            self._believing = False

    def note(self, what: str) -> None:
        """Add a step to the trace."""
        self.trace.append((time.monotonic(), what))

    def _pause(self) -> None:
        """Wait before retrying after busy or full, backing off to the protocol's cap."""
        time.sleep(self._poll * self._jitter.uniform(0.7, 1.3))
        self._poll = min(self._poll * 1.5, MAX_POLL_SECONDS[self.plan.protocol])

    def _time_left(self) -> bool:
        return time.monotonic() < self._deadline

    def _crash_now(self) -> None:
        """Die: from here on this submitter neither renews nor releases."""
        self.crashed = True
        self.crashed_at = datetime.now(UTC)
        self._believing = False
        self._before_crash()
        if self.pod:
            self.rig.emu.delete("pods", self.namespace, self.pod)
        raise Crash()

    def _bodies(self) -> list[dict[str, Any]]:
        return [
            job_body(self.namespace, name, app, self.job_id, {SUBMITTER_ANNOTATION: self.username})
            for name, app in zip(self.job_names, self.plan.apps, strict=True)
        ]

    def _create_jobs(self, create: Any) -> str:
        """Create the search's missing Jobs in order: ``done``, ``full`` (the first Job
        hit the ceiling), ``lost`` (Gate A refused: the hold is gone) or ``retry``."""
        for body in self._bodies():
            name = body["metadata"]["name"]
            if name in self.created:
                continue
            if self.created and self.plan.crash == "mid_jobs":
                self._crash_now()
            time.sleep(self.plan.step_delay)
            code = create(body)
            self.note(f"create {name}: {code}")
            if code in (200, 201, 409):  # 409: AlreadyExists, ours from an earlier try
                self.created.add(name)
                continue
            self.denials[code] += 1
            if code == 429:
                return "full"
            if code == 403:
                return "lost"
            return "retry"
        if self.plan.crash == "after_jobs":
            self._crash_now()
        return "done"

    # -- elb-gate's library ------------------------------------------------------------------

    def _settings(self) -> Settings:
        env = {
            **SHARED_ENV,
            "BLAST_SUBMIT_LEASE_TTL_SECONDS": str(self.ttl),
            "BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS": "180",
            "BLAST_CAPACITY_WAIT_MAX_SECONDS": "180",
        }
        return Settings.from_env(env)

    def _run_client(self) -> None:
        settings = self._settings()
        config = KubeConfig.load(self.rig.emu.kubeconfig(self.kube_user))
        lease = SubmitLease(self.namespace, settings=settings, config=config, source="client")

        def die() -> None:
            # No more renewals, and run_slot's release on the way out is lost with us.
            lease.stop_heartbeat()
            lease.release = lambda: False  # type: ignore[method-assign]

        self._before_crash = die
        try:
            while self._time_left():
                result = "retry"
                cancel = threading.Event()
                stopper = threading.Timer(max(0.0, self._deadline - time.monotonic()), cancel.set)
                stopper.start()
                try:
                    with run_slot(lease, settings, poll_seconds=POLL_SECONDS, cancel=cancel):
                        self.note("slot")
                        self._believing = True
                        if self.plan.crash == "after_acquire":
                            self._crash_now()
                        result = self._create_jobs(lambda body: self._client_create(lease, body))
                        self._believing = False
                except SlotUnavailable:
                    return
                except CoordinationError:
                    time.sleep(POLL_SECONDS)
                    continue
                finally:
                    stopper.cancel()
                if result == "done":
                    return
                time.sleep(POLL_SECONDS)
        finally:
            lease.close()

    def _client_create(self, lease: SubmitLease, body: dict[str, Any]) -> int:
        try:
            lease.kube.run(lambda api: api.create(path(JOBS, self.namespace), body))
        except ApiError as exc:
            return exc.code
        except ApiUnavailable:
            return 0
        return 201

    # -- the elb-gate CLI --------------------------------------------------------------------

    def _cli_script(self, directory: Path) -> Path:
        kubeconfig = self.rig.emu.kubeconfig(self.kube_user)
        lines = [
            "trap ': > \"$D/end\"' EXIT",
            'echo $$ > "$D/pid"',
            ': > "$D/start"',
        ]
        wait = (
            'i=0; while [ ! -e "$D/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done;'
            ' : > "$D/waited"; exit 9'
        )
        if self.plan.crash == "after_acquire":
            lines.append(': > "$D/crash_point"; ' + wait)
        for i, body in enumerate(self._bodies()):
            if body["metadata"]["name"] in self.created:
                continue
            job_file = directory / f"job{i}.json"
            job_file.write_text(json.dumps(body))
            create = f"{KUBECTL} --kubeconfig {kubeconfig} -n {self.namespace}"
            lines.append(
                f'{create} create -f {job_file} >/dev/null 2>>"$D/kubectl.err" || '
                f"{create} get -f {job_file} >/dev/null 2>&1 || exit 3"
            )
            lines.append(f': > "$D/created{i}"')
            if i == 0 and self.plan.crash == "mid_jobs" and len(self.plan.apps) > 1:
                lines.append(': > "$D/crash_point"; ' + wait)
        if self.plan.crash == "after_jobs":
            lines.append(': > "$D/crash_point"; ' + wait)
        script = directory / "submit.sh"
        script.write_text("set -u\n" + "\n".join(lines) + "\n")
        return script

    def _run_cli(self) -> None:
        attempt = 0
        while self._time_left():
            attempt += 1
            directory = self.workdir / f"{self.tag}-cli-{attempt}"
            directory.mkdir(parents=True)
            script = self._cli_script(directory)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("BLAST_", "ELB_GATE_"))}
            env.pop("KUBERNETES_SERVICE_HOST", None)
            env.update(SHARED_ENV)
            env.update(
                {
                    "BLAST_SUBMIT_LEASE_TTL_SECONDS": str(self.ttl),
                    "BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS": "180",
                    "BLAST_CAPACITY_WAIT_MAX_SECONDS": "180",
                    "KUBECONFIG": self.rig.emu.kubeconfig(self.kube_user),
                    "KUBECACHEDIR": str(self.rig.emu.state_dir / "kubectl-cache"),
                    "D": str(directory),
                }
            )
            command = [
                sys.executable, "-m", "elbgate.cli", "submit", "-n", self.namespace,
                "--source", "cli", "--poll-interval", str(POLL_SECONDS),
                "--exec-timeout", str(self.ttl - 1), "--", "sh", str(script),
            ]  # fmt: skip
            self._cli_dir = directory
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
            for i in range(len(self.job_names)):
                if (directory / f"created{i}").exists():
                    self.created.add(self.job_names[i])
            if code == 0 and len(self.created) == len(self.job_names):
                return
            self._cli_dir = None
            time.sleep(POLL_SECONDS)

    def _watch_cli(self, proc: subprocess.Popen[bytes], directory: Path) -> int:
        """Wait for the CLI; at the crash point, SIGKILL it (and its COMMAND) while it
        holds the Lease."""
        while True:
            code = proc.poll()
            if code is not None:
                return code
            if self.plan.crash is not None and (directory / "crash_point").exists():
                self.crashed = True
                self.crashed_at = datetime.now(UTC)
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                pid_file = directory / "pid"
                if pid_file.exists():
                    try:
                        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                for i in range(len(self.job_names)):
                    if (directory / f"created{i}").exists():
                        self.created.add(self.job_names[i])
                self._crash_now()
            if time.monotonic() > self._deadline + 30:
                proc.kill()
                raise TimeoutError("elb-gate submit did not finish")
            time.sleep(0.02)

    # -- the existing submit paths (raw HTTP, kubectl) -----------------------------------------

    def _run_protocol(self) -> None:
        api: LeaseClient = RawClient(self) if self.plan.protocol == "raw" else KubectlClient(self)
        try:
            self._submit_with(api)
        finally:
            api.close()

    def _submit_with(self, api: LeaseClient) -> None:
        if self.plan.intrude:
            # Open the search without the Lease: Gate A must refuse (403).
            self.intrusions += 1
            code = api.create_job(self._bodies()[0])
            if code in (200, 201):
                self.created.add(self.job_names[0])
            elif code == 403:
                self.intrusions_refused += 1
        while self._time_left():
            if not api.acquire():
                self.note("busy")
                self._pause()
                continue
            self.note("acquired")
            self._poll = POLL_SECONDS
            self._believing = True
            if self.plan.crash == "after_acquire":
                self._crash_now()
            if not self.created and not self.plan.skip_census and api.census_count() >= CEILING:
                self._believing = False
                api.release()
                self.note("full")
                self._pause()
                continue
            result = self._create_jobs(api.create_job)
            self._believing = False
            api.release()
            self.note(f"released after {result}")
            if result == "done":
                return
            self._pause()


class LeaseClient:
    """The Lease protocol both existing submit paths speak, on their own clock."""

    def __init__(self, submitter: Submitter, source: str) -> None:
        self.s = submitter
        self.ns = submitter.namespace
        self.name = lease_name(submitter.namespace)
        self.holder = f"{source}-{uuid.uuid4().hex}"
        self.known: dict[str, Any] | None = None

    # transport, per protocol
    def get_lease(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def write_lease(self, body: dict[str, Any], create: bool) -> int:
        raise NotImplementedError

    def create_job(self, body: dict[str, Any]) -> int:
        raise NotImplementedError

    def list_jobs(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    # the protocol
    def acquire(self) -> bool:
        now = datetime.now(UTC)
        current = self.get_lease()
        if current is None:
            code = self.write_lease(new_lease_body(self.ns, self.holder, self.s.ttl, now), True)
            return code in (200, 201)
        view = LeaseView.from_dict(current)
        if view.held and view.holder != self.holder and not is_expired(view, now, 0, self.s.ttl):
            return False
        return (
            self.write_lease(
                self._outgoing(claimed_body(current, self.holder, self.s.ttl, now)), False
            )
            == 200
        )

    def release(self) -> None:
        current = self.get_lease()
        if current is not None and LeaseView.from_dict(current).holder == self.holder:
            self.write_lease(self._outgoing(released_body(current)), False)

    def close(self) -> None:
        """Drop the transport (nothing to do for kubectl)."""

    def census_count(self) -> int:
        return census(self.list_jobs(), datetime.now(UTC), 300).count

    def _outgoing(self, body: dict[str, Any]) -> dict[str, Any]:
        return body


class RawClient(LeaseClient):
    """HTTPS with a bearer token; its PUTs are built without annotations."""

    def __init__(self, submitter: Submitter) -> None:
        super().__init__(submitter, "openapi")
        emu = submitter.rig.emu
        address = urllib.parse.urlsplit(emu.url)
        self.host, self.port = address.hostname or "127.0.0.1", address.port
        self.token = emu.token(submitter.kube_user)
        self.ctx = ssl.create_default_context(cafile=emu.ca_file)
        self.conn: http.client.HTTPSConnection | None = None

    def _call(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        """One request on a kept-alive connection (reconnecting once if it was closed)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(
                    self.host, self.port, context=self.ctx, timeout=30
                )
            try:
                self.conn.request(method, url, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    return 0, {}
                continue
            return resp.status, json.loads(raw or b"{}")
        return 0, {}

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def get_lease(self) -> dict[str, Any] | None:
        code, body = self._call(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{self.ns}/leases/{self.name}"
        )
        if code == 404:
            return None
        if code != 200:
            raise RuntimeError(f"GET lease: {code} {body}")
        return dict(body)

    def write_lease(self, body: dict[str, Any], create: bool) -> int:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{self.ns}/leases"
        code, _ = (
            self._call("POST", base, body)
            if create
            else self._call("PUT", f"{base}/{self.name}", body)
        )
        return code

    def _outgoing(self, body: dict[str, Any]) -> dict[str, Any]:
        body["metadata"].pop("annotations", None)  # a PUT built from scratch, as this path does
        return body

    def create_job(self, body: dict[str, Any]) -> int:
        return self._call("POST", f"/apis/batch/v1/namespaces/{self.ns}/jobs", body)[0]

    def list_jobs(self) -> list[dict[str, Any]]:
        selector = urllib.parse.quote(SEARCH_JOB_SELECTOR)
        code, body = self._call(
            "GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs?labelSelector={selector}"
        )
        if code != 200:
            raise RuntimeError(f"LIST jobs: {code}")
        return list(body.get("items") or [])


class KubectlClient(LeaseClient):
    """``kubectl get/create/replace`` as the submitter's user."""

    def __init__(self, submitter: Submitter) -> None:
        super().__init__(submitter, "dashboard")

    def _kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        emu = self.s.rig.emu
        env = {**os.environ, "KUBECACHEDIR": str(emu.state_dir / "kubectl-cache")}
        return subprocess.run(
            [KUBECTL, "--kubeconfig", emu.kubeconfig(self.s.kube_user), "-n", self.ns, *args],
            input=input, capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip

    @staticmethod
    def _code(result: subprocess.CompletedProcess[str]) -> int:
        if result.returncode == 0:
            return 200
        err = result.stderr
        for marker, code in (
            ("(AlreadyExists)", 409), ("(Conflict)", 409), ("Operation cannot be fulfilled", 409),
            ("(Forbidden)", 403), ("(TooManyRequests)", 429), ("(ServiceUnavailable)", 503),
            ("(Invalid)", 422), ("(InternalError)", 500),
        ):  # fmt: skip
            if marker in err:
                return code
        return 0

    def get_lease(self) -> dict[str, Any] | None:
        result = self._kubectl("get", "lease", self.name, "--ignore-not-found", "-o", "json")
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
        return json.loads(result.stdout) if result.stdout.strip() else None

    def write_lease(self, body: dict[str, Any], create: bool) -> int:
        return self._code(
            self._kubectl("create" if create else "replace", "-f", "-", input=json.dumps(body))
        )

    def create_job(self, body: dict[str, Any]) -> int:
        return self._code(self._kubectl("create", "-f", "-", input=json.dumps(body)))

    def list_jobs(self) -> list[dict[str, Any]]:
        result = self._kubectl("get", "jobs", "-l", SEARCH_JOB_SELECTOR, "-o", "json")
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
        return list(json.loads(result.stdout).get("items") or [])
