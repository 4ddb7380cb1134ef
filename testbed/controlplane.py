"""Start, reuse and stop ``localkube``: a real Kubernetes control plane on 127.0.0.1.

    cp = ControlPlane.start()                 # etcd, kube-apiserver, controller-manager,
    ns = cp.new_namespace("gate")             # scheduler, kubelet stand-in; a few seconds
    cp.kubectl("alice", "-n", ns, "get", "jobs")
    pod = cp.pod_identity(ns, "openapi")      # a Running Pod and a token bound to it
    cp.stop()

One control plane serves a whole test session; tests isolate themselves by
namespace. ``ELB_GATE_CONTROL_PLANE=<dir>`` attaches to one already running
(``make cluster``), so a developer can re-run tests without a restart.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.api import Api, JsonObj
from testbed.audit_log import read_audit
from testbed.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
DEFAULT_KUBE_VERSION = "v1.37.2"
ATTACH_ENV = "ELB_GATE_CONTROL_PLANE"
BINARY_ENV = "LOCALKUBE"

# AKS-shaped nodes: a system pool for elb-gate and the submitters, and a
# blast pool of Standard_E16s_v5 (allocatable measured on AKS: 15740m CPU,
# ≈120.7 GiB memory).
SYSTEM_POOL = {
    "agentpool": "system",
    "kubernetes.azure.com/agentpool": "system",
    "kubernetes.azure.com/mode": "system",
}
BLAST_POOL = {
    "agentpool": "blastpool",
    "kubernetes.azure.com/agentpool": "blastpool",
    "node.kubernetes.io/instance-type": "Standard_E16s_v5",
}


@dataclass(frozen=True)
class NodeSpec:
    """A Node the control plane starts with."""

    name: str
    cpu: str
    memory: str
    labels: Mapping[str, str]
    pods: int = 110

    def listed(self) -> JsonObj:
        """As ``localkube up --nodes`` lists it."""
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        return {"name": self.name, "capacity": capacity, "labels": dict(self.labels)}


DEFAULT_NODES: tuple[NodeSpec, ...] = (
    NodeSpec("aks-system-0", "3860m", "12Gi", SYSTEM_POOL, pods=250),
    NodeSpec("aks-system-1", "3860m", "12Gi", SYSTEM_POOL, pods=250),
    *(NodeSpec(f"aks-blastpool-{i}", "15740m", "126544352Ki", BLAST_POOL) for i in range(3)),
)

NAMED_USERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("alice", ("team",)),
    ("bob", ()),
    ("carol", ("team",)),
    ("mallory", ()),
    ("operator", ("elb-gate-operators",)),
    ("dashboard-lease", ("dashboard",)),
    ("dashboard-apply", ("dashboard",)),
)
POOL_SIZE = 400
"""Plain users ``user-000``… handed out by :meth:`ControlPlane.plain_user` (the
API server reads its token file once, at start)."""


@dataclass(frozen=True)
class PodIdentity:
    """A Pod and a service-account token bound to it (TokenRequest), as a
    submitter running in the cluster holds."""

    namespace: str
    service_account: str
    pod: str
    pod_uid: str
    node: str
    token: str
    kubeconfig: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    @property
    def stamp(self) -> str:
        """What elb-gate's Lease stamp writes for this pod: ``<ns>/<pod>/<uid>``."""
        return f"{self.namespace}/{self.pod}/{self.pod_uid}"


def halt(process: subprocess.Popen[bytes], grace: float = 20.0, *, group: bool = False) -> int:
    """SIGTERM and wait ``grace`` seconds, then SIGKILL (``group``: its whole process
    group, which it leads); the exit code."""
    process.terminate()  # a no-op once it has exited
    try:
        return process.wait(grace)
    except subprocess.TimeoutExpired:
        (os.killpg if group else os.kill)(process.pid, signal.SIGKILL)
    return process.wait(10)


def binary_path() -> Path:
    """Where ``make localkube`` puts the binary for the Kubernetes release under test."""
    if os.environ.get(BINARY_ENV):
        return Path(os.environ[BINARY_ENV])
    version = os.environ.get("KUBE_VERSION") or DEFAULT_KUBE_VERSION
    return REPO / ".build" / f"localkube-{version}" / "localkube"


def kubectl_path() -> Path:
    """kubectl built from the same release (a link to the localkube binary)."""
    return binary_path().parent / "kubectl"


class ControlPlane:
    """A running localkube."""

    def __init__(
        self, state_dir: Path, state: Mapping[str, Any], process: subprocess.Popen[bytes] | None
    ) -> None:
        self.state_dir = state_dir
        self.state = dict(state)
        self.process = process
        self.etcd_dir: Path | None = None
        """etcd's data directory when it is outside ``state_dir`` (in memory): removed
        by :meth:`stop`."""
        self.server: str = state["server"]
        self.ca_file: str = state["caFile"]
        self.audit_log = Path(state["auditLog"])
        self.kubernetes_version: str = state["kubernetesVersion"]
        self.startup_seconds: float = float(state["startupSeconds"])
        self._apis: dict[str, Api] = {}
        self.admin = self.api("admin")
        self._pool = itertools.count()  # next() on it is atomic: no lock among threads
        self._namespaces = itertools.count(1)
        self._run_id = uuid.uuid4().hex[:6]

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        state_dir: Path | None = None,
        *,
        nodes: Sequence[NodeSpec] = DEFAULT_NODES,
        system_nodes: Sequence[tuple[str, Mapping[str, str]]] = (),
        etcd_quota_bytes: int = 0,
    ) -> ControlPlane:
        """Start localkube and wait until it is ready (API, controllers, nodes).

        ``system_nodes`` (name, labels) are real kubelet nodes (the system tier:
        root, containerd, runc and the CNI plugins; see testbed/system_tier.py);
        ``etcd_quota_bytes``: etcd's backend quota (0: etcd's default, 2 GiB)."""
        binary = binary_path()
        if not binary.exists():
            raise RuntimeError(f"{binary} is missing: build it with `make localkube`")
        state_dir = state_dir or Path(tempfile.mkdtemp(prefix="localkube-"))
        state_dir.mkdir(parents=True, exist_ok=True)
        users = [{"name": n, "groups": list(g)} for n, g in NAMED_USERS]
        users += [{"name": f"user-{i:03d}", "groups": ["team"]} for i in range(POOL_SIZE)]
        listed = [node.listed() for node in nodes]
        listed += [{"name": n, "labels": dict(labels), "real": True} for n, labels in system_nodes]
        args = [str(binary), "up", "--dir", str(state_dir)]
        for flag, value in (("users", users), ("nodes", listed)):
            (state_dir / f"{flag}.json").write_text(json.dumps(value))
            args += [f"--{flag}", str(state_dir / f"{flag}.json")]
        if etcd_quota_bytes:
            args += ["--etcd-quota-bytes", str(etcd_quota_bytes)]
        memory = Path("/dev/shm")  # RAM-backed: etcd's data there, when the machine has it
        etcd_dir = None
        if memory.is_dir() and os.access(memory, os.W_OK):
            sweep_stale_etcd_dirs(memory)
            etcd_dir = memory / f"{ETCD_DIR_PREFIX}{uuid.uuid4().hex[:8]}"
            args += ["--etcd-dir", str(etcd_dir)]
        out = open(state_dir / "localkube.log", "ab")
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        state_file = state_dir / "state.json"

        def ready() -> bool:
            if state_file.exists():
                return True
            if process.poll() is not None:  # it will never be: fail now, with its log
                text = (state_dir / "localkube.log").read_text(errors="replace")[-4000:]
                raise RuntimeError(f"localkube exited ({process.returncode}):\n{text}")
            return False

        try:
            wait_until(ready, 300, f"localkube to be ready (see {state_dir})")
        except BaseException:
            halt(process, 60, group=True)  # as stop(): localkube undoes what it changed
            if etcd_dir is not None:
                shutil.rmtree(etcd_dir, ignore_errors=True)
            raise
        cp = cls(state_dir, json.loads(state_file.read_text()), process)
        cp.etcd_dir = etcd_dir
        return cp

    @classmethod
    def attach(cls, state_dir: Path) -> ControlPlane:
        """Use a control plane started elsewhere (``make cluster``)."""
        state = json.loads((state_dir / "state.json").read_text())
        return cls(state_dir, state, None)

    @classmethod
    def for_session(cls) -> ControlPlane:
        """The one a test session uses: attached when ``ELB_GATE_CONTROL_PLANE`` names one."""
        attached = os.environ.get(ATTACH_ENV)
        if attached:
            return cls.attach(Path(attached))
        return cls.start()

    def stop(self) -> None:
        """Stop localkube (only one this object started) and remove its files."""
        if self.process is None:
            return
        halt(self.process, 60, group=True)  # what localkube started dies with it
        shutil.rmtree(self.state_dir, ignore_errors=True)
        if self.etcd_dir is not None:  # localkube removes it too, unless it was killed
            shutil.rmtree(self.etcd_dir, ignore_errors=True)

    # -- identities ---------------------------------------------------------------------

    def kubeconfig(self, user: str) -> str:
        """Kubeconfig of a plain user from the token file."""
        return str(self.state["kubeconfigs"][user])

    def token(self, user: str) -> str:
        return str(self.state["tokens"][user])

    def api(self, user: str) -> Api:
        """A client authenticated as ``user`` (a token-file user)."""
        if user not in self._apis:
            self._apis[user] = Api(self.server, self.ca_file, self.token(user))
        return self._apis[user]

    def plain_user(self) -> str:
        """A token-file user no one else in this process has used."""
        name = f"user-{next(self._pool):03d}"
        if name not in self.state["tokens"]:
            raise RuntimeError(f"the token file has only {POOL_SIZE} pool users")
        return name

    def api_for_token(self, token: str) -> Api:
        return Api(self.server, self.ca_file, token)

    def pod_identity(
        self,
        namespace: str,
        service_account: str,
        *,
        pod: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        restart_policy: str = "Always",
        annotations: Mapping[str, str] | None = None,
        containers: Sequence[str] = ("app",),
    ) -> PodIdentity:
        """A Running Pod of ``service_account`` and a token bound to it (the real
        TokenRequest API), as the in-cluster submit path holds; with a kubeconfig.
        ``node_selector``: the system pool unless given (``{}``: any node)."""
        self.ensure_service_account(namespace, service_account)
        name = pod or f"{service_account}-{uuid.uuid4().hex[:6]}"
        restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        body: JsonObj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/name": service_account},
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "serviceAccountName": service_account,
                "restartPolicy": restart_policy,
                "terminationGracePeriodSeconds": 30,
                "nodeSelector": dict(SYSTEM_POOL if node_selector is None else node_selector),
                # Compliant with Pod Security "restricted", which elb-system enforces.
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": c,
                        "image": "elb-openapi:4.27",
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                        "securityContext": restricted,
                    }
                    for c in containers
                ],
            },
        }

        def create() -> JsonObj | None:
            """Create the Pod, or take the one of that name and ServiceAccount an earlier
            test session left on an attached control plane (``ELB_GATE_CONTROL_PLANE``);
            ``None`` while a Pod of that name is still being removed (a StatefulSet
            recreating a Pod waits the same way)."""
            existing = self.admin.find("pods", namespace, name)
            if existing is not None:
                if existing["metadata"].get("deletionTimestamp"):
                    return None
                if existing["spec"].get("serviceAccountName") == service_account:
                    return existing
            return self.admin.create(body)

        uid = wait_until(create, 120, f"pod {namespace}/{name} created", 0.05)["metadata"]["uid"]

        def running() -> JsonObj | None:
            found = self.admin.find("pods", namespace, name)
            if found is None or found["metadata"]["uid"] != uid:
                return None
            return found if found["status"].get("phase") == "Running" else None

        pod_now = wait_until(running, 120, f"pod {namespace}/{name} Running", 0.05)
        token = self.pod_token(pod_now, 86400)
        path = self.state_dir / "kubeconfigs" / f"sa-{namespace}-{name}-{uid[:8]}.kubeconfig"
        self.write_kubeconfig(path, f"{namespace}-{name}", token, namespace)
        node = pod_now["spec"].get("nodeName", "")
        return PodIdentity(namespace, service_account, name, uid, node, token, str(path))

    def pod_token(self, pod: JsonObj, expiration_seconds: int = 3600) -> str:
        """A token of the Pod's ServiceAccount bound to the Pod (TokenRequest with a
        ``boundObjectRef``), as the kubelet projects it into the Pod."""
        meta = pod["metadata"]
        bound = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        spec = {"expirationSeconds": expiration_seconds, "boundObjectRef": bound}
        return self._token(meta["namespace"], account, spec)

    def service_account_token(self, namespace: str, service_account: str) -> str:
        """A token for a ServiceAccount not bound to any Pod (valid a day)."""
        self.ensure_service_account(namespace, service_account)
        return self._token(namespace, service_account, {"expirationSeconds": 86400})

    def _token(self, namespace: str, account: str, spec: JsonObj) -> str:
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = self.admin.resource("serviceaccounts").path(namespace, account, "token")
        return str(self.admin.request("POST", path, request)["status"]["token"])

    def write_kubeconfig(
        self,
        path: Path,
        user: str,
        token: str,
        namespace: str = "default",
        *,
        server: str | None = None,
        ca_file: str | None = None,
    ) -> str:
        """A kubeconfig of ``user`` with ``token``, for this API server (or ``server``,
        trusted through ``ca_file``: a proxy in front of it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        ca = ca_file or self.ca_file
        cluster = {"server": server or self.server, "certificate-authority": ca}
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "localkube", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {
                    "name": f"{user}@localkube",
                    "context": {"cluster": "localkube", "user": user, "namespace": namespace},
                }
            ],
            "current-context": f"{user}@localkube",
        }
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return str(path)

    def ensure_service_account(self, namespace: str, name: str) -> None:
        self.ensure_namespace(namespace)
        meta = {"name": name, "namespace": namespace}
        self.admin.create_once({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})

    # -- namespaces ---------------------------------------------------------------------

    def new_namespace(self, prefix: str = "t", labels: Mapping[str, str] | None = None) -> str:
        """A fresh namespace (unique in this control plane), ready for Pods."""
        name = f"{prefix}-{self._run_id}-{next(self._namespaces)}"[:63].rstrip("-")
        self.ensure_namespace(name, labels)
        return name

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        meta = {"name": name, "labels": dict(labels or {})}
        self.admin.create_once({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        if labels:  # on one that was there already, too
            self.admin.patch("namespaces", None, name, {"metadata": {"labels": dict(labels)}})
        # Pods need the namespace's default ServiceAccount (the controller creates it).
        wait_until(
            lambda: self.admin.find("serviceaccounts", name, "default"),
            60,
            f"ServiceAccount {name}/default",
        )

    # -- tools --------------------------------------------------------------------------

    def kubectl(
        self,
        user: str,
        *args: str,
        input: str | None = None,
        timeout: float = 60,
        kubeconfig: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl as ``user`` (text mode, output captured)."""
        config = kubeconfig or self.kubeconfig(user)
        env = {**os.environ, "KUBECACHEDIR": str(self.state_dir / "kubectl-cache")}
        return subprocess.run(
            [str(kubectl_path()), "--kubeconfig", config, *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def audit_events(self) -> list[JsonObj]:
        """What the API server's audit log holds so far (writes to Jobs and Leases)."""
        return read_audit(self.audit_log)[0]


ETCD_DIR_PREFIX = "localkube-etcd-"
STALE_AFTER_SECONDS = 600.0
"""A data directory no process holds open is left alone this long after its last
change: long enough for a localkube that is starting to open it."""


def held_open() -> set[str]:
    """Every path some process on the machine holds open (that this user may see)."""
    held = set()
    for fd in glob.glob("/proc/[0-9]*/fd/*"):  # glob skips the directories it may not read
        with suppress(OSError):  # the process ended, or closed the file
            held.add(os.readlink(fd))
    return held


def sweep_stale_etcd_dirs(memory: Path, *, now: float | None = None) -> list[Path]:
    """Remove the etcd data directories a run left in ``memory`` when it was killed
    before it could remove its own (they hold RAM until the machine restarts): those
    no process holds a file of open, unchanged for :data:`STALE_AFTER_SECONDS`.
    Returns what was removed."""
    now = time.time() if now is None else now
    held = held_open()
    removed = []
    for d in sorted(memory.glob(f"{ETCD_DIR_PREFIX}*")):
        try:
            if not d.is_dir() or now - d.stat().st_mtime < STALE_AFTER_SECONDS:
                continue
        except OSError:
            continue
        prefix = f"{d}/"
        if any(path.startswith(prefix) for path in held):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed
