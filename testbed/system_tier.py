"""The system tier: the chart installed as shipped, on real kubelet nodes.

``localkube up --system-node`` adds real nodes beside the stand-in: the upstream
kubelet of the pinned release with containerd, runc and a CNI bridge the run
creates (see localkube/system.go for every change it makes on the host and how
it is undone). Here the chart is installed with ``helm install`` unmodified,
its image imported into each node's containerd, and the API server calls the
webhook through the Service (``--enable-aggregator-routing``: EndpointSlice →
Pod IP), so probes, ``preStop``, restarts, limits and the Service all run.

It needs root, the binaries ``localkube/build.sh … --system`` builds, Debian's
``containerd``, ``runc``, ``containernetworking-plugins`` and ``iptables``, and
the image (``make image``). :func:`unavailable` says what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from manifests.generate import CHART, helm_path
from testbed.api import JsonObj
from testbed.controlplane import SYSTEM_POOL, ControlPlane, binary_path
from testbed.install import SUBMITTER_ROLE, SUBMITTER_RULES
from testbed.waiting import wait_until

RELEASE = "elb-gate"
NAMESPACE = "elb-system"
REQUIRED_ENV = "ELB_GATE_SYSTEM_TIER"
"""``required``: a missing prerequisite fails the system tests instead of skipping them
(``make test-system`` and CI set it)."""

SYSTEM_NODES: tuple[tuple[str, Mapping[str, str]], ...] = tuple(
    (f"aks-system-{i}", {**SYSTEM_POOL, "topology.kubernetes.io/zone": f"zone-{i + 1}"})
    for i in range(3)
)
"""Three real nodes of the system pool: the webhook's two replicas must sit on two
nodes, and a third lets one be drained."""
TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "iptables")


def unavailable() -> str | None:
    """Why the system tier cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "the system tier runs a kubelet and containerd: it needs root (CI runs as root)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("containernetworking-plugins")
    if missing:
        return (
            f"{', '.join(missing)} not installed "
            "(apt-get install containerd runc containernetworking-plugins iptables)"
        )
    here = binary_path().parent
    for name in ("kubelet", "pause"):
        if not (here / name).exists():
            return f"{here / name} is missing: make localkube-system builds it"
    if not os.environ.get(IMAGE_ENV):
        from image import build
        from testbed.image import why_unbuildable

        if not build.is_current() and why_unbuildable():
            return f"the image (make image) is not built and cannot be: {why_unbuildable()}"
    return None


IMAGE_ENV = "ELB_GATE_IMAGE_ARCHIVE"
"""An OCI archive to import instead of ``make image``'s (e.g. one built from another
revision, to show what that revision does on a kubelet)."""


def _image() -> Path:
    if os.environ.get(IMAGE_ENV):
        return Path(os.environ[IMAGE_ENV])
    from testbed.image import ensure_image

    return ensure_image()


class SystemTier:
    """A control plane with real kubelet nodes, and the chart on it."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.system: Mapping[str, Any] = cp.state["system"]
        self.nodes = [str(n["name"]) for n in self.system["nodes"]]
        self.timings: dict[str, float] = {}

    @classmethod
    def start(cls, nodes: Sequence[tuple[str, Mapping[str, str]]] = SYSTEM_NODES) -> SystemTier:
        began = time.monotonic()
        cp = ControlPlane.start(nodes=(), system_nodes=nodes)
        tier = cls(cp)
        tier.timings["start"] = time.monotonic() - began
        return tier

    def stop(self) -> None:
        self.cp.stop()

    # -- images -------------------------------------------------------------------------

    def import_image(self, archive: Path | None = None) -> Path:
        """Import the product's image (``make image``) into every node's containerd."""
        archive = archive or _image()
        for node in self.system["nodes"]:
            self.ctr(node["name"], "images", "import", str(archive))
        return archive

    def ctr(self, node: str, *args: str) -> str:
        """``ctr`` against one node's containerd (namespace k8s.io, the CRI's)."""
        [sock] = [n["containerdSocket"] for n in self.system["nodes"] if n["name"] == node]
        proc = subprocess.run(
            ["ctr", "--address", sock, "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} on {node}: {proc.stderr.strip()}")
        return proc.stdout

    # -- helm and kubectl ---------------------------------------------------------------

    def helm(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """The pinned helm as the administrator (no proxy: everything is local)."""
        env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")} | {
            "KUBECONFIG": self.cp.kubeconfig("admin"),
            "HELM_CACHE_HOME": str(self.cp.state_dir / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(self.cp.state_dir / "helm" / "config"),
            "HELM_DATA_HOME": str(self.cp.state_dir / "helm" / "data"),
        }
        return subprocess.run(
            [str(helm_path()), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def install(
        self, *values: str, action: str = "install", strings: Sequence[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        """``helm install elb-gate charts/elb-gate -n elb-system --create-namespace``
        with ``--set`` values, as the README says; timed into ``timings[action]``. A
        successful install returns once the controller has registered the webhook
        configurations (``timings["registered"]``)."""
        began = time.monotonic()
        args = [action, RELEASE, str(CHART), "-n", NAMESPACE]
        if action == "install":
            args.append("--create-namespace")
        for v in values:
            args += ["--set", v]
        for v in strings:
            args += ["--set-string", v]
        result = self.helm(*args)
        self.timings[action] = time.monotonic() - began
        if (
            action == "install"
            and result.returncode == 0
            and "webhook.registration=chart" not in values
        ):
            # The controller registers the webhook configurations once a webhook Pod
            # is Ready (docs/design.md, "Registration"): the install serves from then.
            self.wait_registered()
            self.timings["registered"] = time.monotonic() - began
        return result

    def wait_registered(self, timeout: float = 240) -> None:
        """Wait until both of elb-gate's webhook configurations exist."""

        def registered() -> bool:
            return all(
                self.cp.admin.find(kind, None, RELEASE) is not None
                for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
            )

        wait_until(registered, timeout, "the controller to register both webhook configurations")

    def kubectl(self, user: str, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cp.kubectl(user, *args, **kw)

    # -- the cluster's side of a submit path --------------------------------------------

    def open_namespace(self, namespace: str) -> str:
        """Create ``namespace`` and let the named users submit there (what a cluster
        grants ElasticBLAST's users; elb-gate's own RoleBindings come from the chart)."""
        self.cp.ensure_namespace(namespace)
        self.cp.admin.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": SUBMITTER_ROLE},
                "rules": SUBMITTER_RULES,
            }
        )
        self.cp.admin.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": SUBMITTER_ROLE, "namespace": namespace},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": SUBMITTER_ROLE,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team"},
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"},
                ],
            }
        )
        return namespace

    # -- observation --------------------------------------------------------------------

    def pods(self, component: str) -> list[JsonObj]:
        return self.cp.admin.list(
            "pods", NAMESPACE, label_selector=f"app.kubernetes.io/component={component}"
        )

    def ready_endpoints(self, service: str) -> list[str]:
        """Addresses of the Service's EndpointSlices that are ready (what the API
        server dials with aggregator routing)."""
        out: list[str] = []
        for s in self.cp.admin.list(
            "endpointslices", NAMESPACE, label_selector=f"kubernetes.io/service-name={service}"
        ):
            for ep in s.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready"):
                    out += ep.get("addresses") or []
        return sorted(out)

    def wait_ready_or_crash(self, component: str, replicas: int, timeout: float = 240) -> None:
        """Wait until ``replicas`` Pods of ``component`` are Ready; fail at once, with the
        container's last words, when one exits instead (a crash is not a slow start)."""

        def check() -> bool:
            ready = 0
            for pod in self.pods(component):
                for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                    last = (cs.get("lastState") or {}).get("terminated") or (
                        cs.get("state") or {}
                    ).get("terminated")
                    if last:
                        name = pod["metadata"]["name"]
                        logs = self.kubectl(
                            "admin",
                            "-n",
                            NAMESPACE,
                            "logs",
                            name,
                            "-c",
                            cs["name"],
                            "--previous",
                            "--tail=20",
                        )
                        raise AssertionError(
                            f"{name} ({cs['name']}) exited {last.get('exitCode')} "
                            f"({last.get('reason')}): {logs.stdout.strip() or logs.stderr.strip()}"
                        )
                    ready += bool(cs.get("ready"))
            return ready >= replicas

        wait_until(check, timeout, f"{replicas} Ready Pods of {component}")

    def wait_rolled_out(self, deployment: str, timeout: float = 300) -> None:
        result = self.kubectl(
            "admin",
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            f"deployment/{deployment}",
            f"--timeout={int(timeout)}s",
            timeout=timeout + 30,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"deployment/{deployment} not rolled out: {result.stderr.strip()}\n"
                + self.describe()
            )

    def describe(self) -> str:
        """Pods of the release, their states and last logs (for a failure's message)."""
        lines = []
        for pod in self.cp.admin.list("pods", NAMESPACE):
            name = pod["metadata"]["name"]
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                lines.append(f"{name} on {pod['spec'].get('nodeName')}: {cs.get('state')}")
            logs = self.kubectl("admin", "-n", NAMESPACE, "logs", name, "--tail=5")
            lines.append(logs.stdout.strip() or logs.stderr.strip())
        return "\n".join(lines)

    def egress_dropped(self) -> int:
        """Packets forwarded from the pod bridge to anywhere but the bridge (the tier's
        counter: they are dropped, and nothing should try)."""
        chain = self.system["egressChain"]
        out = subprocess.run(
            ["iptables", "-t", "filter", "-L", chain, "-v", "-x", "-n"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return sum(
            int(line.split()[0]) for line in out.splitlines()[2:] if "DROP" in line.split()[2:3]
        )

    def wait_until(self, what: str, timeout: float, check: Any) -> Any:
        return wait_until(check, timeout, what)


def host_snapshot() -> dict[str, Any]:
    """What the tier may change on the host: kernel parameters, routes, iptables,
    links, mounts, network namespaces, cgroups (compared before start and after stop)."""

    def run(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout

    sysctls = {}
    for name in (
        "vm/overcommit_memory",
        "vm/panic_on_oom",
        "kernel/panic",
        "kernel/panic_on_oops",
        "kernel/keys/root_maxkeys",
        "kernel/keys/root_maxbytes",
        "net/ipv4/ip_forward",
        "net/ipv4/conf/all/forwarding",
    ):
        p = Path("/proc/sys") / name
        sysctls[name] = p.read_text().strip() if p.exists() else None
    mounts = sorted(
        line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
    cgroups = sorted(p.name for p in Path("/sys/fs/cgroup/memory").iterdir() if p.is_dir())
    return {
        "sysctls": sysctls,
        "routes": run("ip", "-4", "route", "show", "table", "all"),
        "links": sorted(line.split()[0] for line in run("ip", "-br", "link").splitlines()),
        "iptables": "\n".join(
            line
            for line in run("iptables-save").splitlines()
            if not line.startswith("#") and not line.startswith(":")
        ),
        "iptables-chains": sorted(
            line.split()[0] for line in run("iptables-save").splitlines() if line.startswith(":")
        ),
        "mounts": mounts,
        "netns": sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else [],
        "cgroups": cgroups,
        "run-containerd": os.path.exists("/run/containerd"),
        "ledgers": os.path.exists("/run/localkube-system"),
    }
