"""The system tier: the chart installed as shipped, on real kubelet nodes.

``localkube up --nodes`` adds real nodes (``"real": true``) beside the stand-in: the upstream
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

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from manifests.generate import CHART, helm_path
from testbed.api import JsonObj
from testbed.controlplane import SYSTEM_POOL, ControlPlane, NodeSpec, binary_path
from testbed.install import SUBMITTER_CLUSTER_ROLE, submitter_binding
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


def _out(*argv: str, check: bool = True) -> str:
    """``argv``'s standard output; when ``check``, a failure raises with its standard error."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


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


SOCKET_PATH_MAX = 107
"""The longest path a Unix socket may have (``sun_path`` is 108 bytes with its NUL)."""
DEEPEST_SOCKET = "kubelet/device-plugins/kubelet.sock"
"""The deepest socket under a node's directory (the kubelet's device-plugin socket;
containerd's ``containerd.sock`` sits higher)."""

IMAGE_ENV = "ELB_GATE_IMAGE_ARCHIVE"
"""An OCI archive to import instead of ``make image``'s (e.g. one built from another
revision, to show what that revision does on a kubelet)."""


class SystemTier:
    """A control plane with real kubelet nodes, and the chart on it."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.system: Mapping[str, Any] = cp.state["system"]
        self.nodes = [str(n["name"]) for n in self.system["nodes"]]
        self.timings: dict[str, float] = {}

    @classmethod
    def start(
        cls,
        nodes: Sequence[tuple[str, Mapping[str, str]]] = SYSTEM_NODES,
        *,
        stand_ins: Sequence[NodeSpec] = (),
    ) -> SystemTier:
        """Real kubelet ``nodes``, and ``stand_ins`` (the stand-in kubelet's nodes, e.g.
        the blast pool of a demo whose search Pods run no real image) beside them."""
        # What tempfile.mkdtemp(prefix="localkube-") makes for the control plane.
        base = Path(tempfile.gettempdir()) / ("localkube-" + "x" * 8)
        longest = max((len(name) for name, _ in nodes), default=0)
        socket = f"{base}/system/nodes/{'x' * longest}/{DEEPEST_SOCKET}"
        if len(socket.encode()) > SOCKET_PATH_MAX:
            raise RuntimeError(
                f"{base} is too deep for the nodes' sockets ({socket}: "
                f"{len(socket.encode())} > {SOCKET_PATH_MAX} bytes): use a shorter TMPDIR"
            )
        began = time.monotonic()
        cp = ControlPlane.start(nodes=stand_ins, system_nodes=nodes)
        tier = cls(cp)
        tier.timings["start"] = time.monotonic() - began
        return tier

    def stop(self) -> None:
        self.cp.stop()

    # -- images -------------------------------------------------------------------------

    def import_image(self) -> Path:
        """Import the product's image (``make image``, or ``$ELB_GATE_IMAGE_ARCHIVE``)
        into every node's containerd."""
        from testbed.image import ensure_image

        archive = Path(os.environ.get(IMAGE_ENV) or ensure_image())
        for node in self.system["nodes"]:
            self.ctr(node["name"], "images", "import", str(archive))
        return archive

    def ctr(self, node: str, *args: str) -> str:
        """``ctr`` against one node's containerd (namespace k8s.io, the CRI's)."""
        [sock] = [n["containerdSocket"] for n in self.system["nodes"] if n["name"] == node]
        return _out("ctr", "--address", sock, "-n", "k8s.io", *args)

    # -- helm and kubectl ---------------------------------------------------------------

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
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
            timeout=600,
            check=False,
        )

    def install(
        self,
        *values: str,
        action: str = "install",
        strings: Sequence[str] = (),
        files: Sequence[Path] = (),
    ) -> subprocess.CompletedProcess[str]:
        """``helm install elb-gate charts/elb-gate -n elb-system --create-namespace``
        with ``--set`` values (and ``-f`` files), as the README says; timed into
        ``timings[action]``. A successful install returns once the controller has
        registered the webhook configurations (``timings["registered"]``)."""
        began = time.monotonic()
        args = [action, RELEASE, str(CHART), "-n", NAMESPACE]
        if action == "install":
            args.append("--create-namespace")
        for f in files:
            args += ["-f", str(f)]
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
            wait_until(
                lambda: all(
                    self.cp.admin.find(kind, None, RELEASE) is not None
                    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
                ),
                240,
                "the controller to register both webhook configurations",
            )
            self.timings["registered"] = time.monotonic() - began
        return result

    def kubectl(self, user: str, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cp.kubectl(user, *args, **kw)

    # -- the cluster's side of a submit path --------------------------------------------

    def open_namespace(self, namespace: str, subjects: Sequence[JsonObj] | None = None) -> str:
        """Create ``namespace`` and let the named users (or ``subjects``) submit there
        (what a cluster grants ElasticBLAST's users; elb-gate's own RoleBindings come
        from the chart)."""
        self.cp.ensure_namespace(namespace)
        self.cp.admin.apply(SUBMITTER_CLUSTER_ROLE)
        rbac = "rbac.authorization.k8s.io"
        named = [
            {"apiGroup": rbac, "kind": "Group", "name": "team"},
            {"apiGroup": rbac, "kind": "User", "name": "bob"},
        ]
        self.cp.admin.apply(
            submitter_binding(namespace, list(subjects) if subjects is not None else named)
        )
        return namespace

    # -- observation --------------------------------------------------------------------

    def pods(self, component: str) -> list[JsonObj]:
        return self.cp.admin.list(
            "pods", NAMESPACE, label_selector=f"app.kubernetes.io/component={component}"
        )

    def metrics_urls(self, component: str) -> dict[str, str]:
        """``http://<pod IP>:9090`` of each running Pod of ``component`` (not being
        deleted), by Pod name: its metrics port, on the run's own bridge."""
        return {
            p["metadata"]["name"]: f"http://{p['status']['podIP']}:9090"
            for p in self.pods(component)
            if (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
        }

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

    def wait_ready_or_crash(self, component: str, replicas: int) -> None:
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

        wait_until(check, 240, f"{replicas} Ready Pods of {component}")

    def wait_rolled_out(self, deployment: str) -> None:
        result = self.kubectl(
            "admin",
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            f"deployment/{deployment}",
            "--timeout=300s",
            timeout=330,
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
        out = _out("iptables", "-t", "filter", "-L", self.system["egressChain"], "-v", "-x", "-n")
        return sum(
            int(line.split()[0]) for line in out.splitlines()[2:] if "DROP" in line.split()[2:3]
        )

    @contextmanager
    def address_beyond_the_bridge(self) -> Iterator[tuple[str, str]]:
        """An address of this run's own, off the pod bridge, for the egress counter's
        positive control: a network namespace (``lkc-<id>``) and a veth pair into it,
        its inner end ``198.18.<n>.1`` (198.18.0.0/15 is set aside for test networks,
        RFC 2544; ``n`` the run's /24 of the bridge, so runs never share one) and a /32
        route to it on the host. Refused when the host already routes that address
        anywhere but by its default route (a network of its own there). A Pod's packet
        to it is forwarded out of the bridge, which the egress chain must count and
        drop. Yields (address, namespace); the namespace goes at the end, and with it
        both veth ends and the route."""
        bridge = str(self.system["bridge"])
        n = int(str(self.system["subnet"]).split(".")[2])
        address, netns = f"198.18.{n}.1", f"lkc-{bridge.removeprefix('lk')}"
        host_end, inner_end = f"{bridge}c", f"{bridge}p"

        def ip(*argv: str) -> str:
            return _out("ip", *argv)

        routed = [r for r in ip("-4", "route", "show", "match", address).splitlines() if r]
        if any(not r.startswith("default ") for r in routed):
            raise RuntimeError(f"the host routes {address} already: {routed}")
        netns_dir = Path("/run/netns")
        made_dir = not netns_dir.exists()  # ip makes it, and mounts it on itself
        ip("netns", "add", netns)
        try:
            ip("link", "add", host_end, "type", "veth", "peer", "name", inner_end, "netns", netns)
            ip("-n", netns, "addr", "add", f"{address}/32", "dev", inner_end)
            ip("-n", netns, "link", "set", inner_end, "up")
            ip("link", "set", host_end, "up")
            ip("route", "add", f"{address}/32", "dev", host_end)
            yield address, netns
        finally:
            _out("ip", "link", "del", host_end, check=False)
            ip("netns", "del", netns)
            if made_dir and not any(netns_dir.iterdir()):
                _out("umount", str(netns_dir), check=False)
                netns_dir.rmdir()

    @staticmethod
    def ipv4_received(netns: str) -> int:
        """IPv4 packets the namespace's stack has received (``Ip: InReceives``)."""
        out = _out("ip", "netns", "exec", netns, "cat", "/proc/net/snmp")
        header, values = [line.split() for line in out.splitlines() if line.startswith("Ip:")][:2]
        return int(values[header.index("InReceives")])

    def wait_until(self, what: str, timeout: float, check: Any) -> Any:
        return wait_until(check, timeout, what)


def host_snapshot() -> dict[str, Any]:
    """What the tier may change on the host: kernel parameters, routes, iptables,
    links, mounts, network namespaces, cgroups (compared before start and after stop)."""

    def run(*argv: str) -> str:
        return _out(*argv, check=False)

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
        "others": _other_runs(),
        "sysctls": sysctls,
        "routes": run("ip", "-4", "route", "show", "table", "all"),
        "links": sorted(line.split()[0] for line in run("ip", "-br", "link").splitlines()),
        **iptables_state(run("iptables-save")),
        "mounts": mounts,
        "netns": sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else [],
        "cgroups": cgroups,
        "run-containerd": os.path.exists("/run/containerd"),
        "ledgers": os.path.exists("/run/localkube-system"),
    }


def iptables_state(saved: str) -> dict[str, Any]:
    """``iptables-save`` as the host comparison reads it: each table's rules and chain
    names, counters dropped. A table with no rule and only its built-in chains at
    policy ACCEPT filters nothing, and reads as absent: the kernel creates such a table
    when a program first lists it and never removes it, so on a host that had loaded
    none before the tier it is no change the tier could restore."""
    tables: list[tuple[str, list[str], list[str]]] = []
    for line in saved.splitlines():
        if line.startswith("*"):
            tables.append((line, [], []))
        elif line.startswith(":") and tables:
            tables[-1][2].append(line)
        elif line and not line.startswith("#") and line != "COMMIT" and tables:
            tables[-1][1].append(line)
    rules: list[str] = []
    chains: list[str] = []
    for table, table_rules, table_chains in tables:
        pristine = not table_rules and all(c.split()[1:2] == ["ACCEPT"] for c in table_chains)
        if pristine:
            continue
        rules += [table, *table_rules, "COMMIT"]
        chains += [c.split()[0] for c in table_chains]
    return {"iptables": "\n".join(rules), "iptables-chains": sorted(chains)}


LEDGERS = Path("/run/localkube-system")
SHARED = ("sysctls", "run-containerd", "ledgers")
"""What every live run shares: compared only when no other run was live."""


def _other_runs() -> dict[str, list[str]]:
    """The footprint of the runs live now (each has a ledger whose process is alive):
    ids, directories, bridges and the veths on them, blackhole routes."""
    out: dict[str, list[str]] = {"ids": [], "dirs": [], "links": [], "routes": []}
    for path in sorted(LEDGERS.glob("*.json")) if LEDGERS.is_dir() else []:
        try:
            led = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not led.get("pid") or not Path(f"/proc/{led['pid']}").exists():
            continue
        out["ids"].append(path.stem)
        out["dirs"].append(str(Path(led.get("dir") or "/nonexistent").parent))
        bridge = led.get("bridge") or ""
        if bridge:
            listed = _out("ip", "-br", "link", "show", "master", bridge, check=False)
            out["links"] += [
                line.split()[0].split("@")[0] for line in listed.splitlines() if line.split()
            ]
        out["routes"] += [" ".join(r) for r in led.get("routes") or []]
    return out


def host_differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What differs between two :func:`host_snapshot`, less what belongs to other runs
    live at either moment (several runs may share a host): their ids, directories,
    veths and routes are left out, and what all runs share (kernel parameters, the
    kubelet's ``KUBE-*`` chains, ``/run/containerd``) is compared only when no other
    run was live. With no other run (CI), everything is compared."""
    others: dict[str, set[str]] = {
        k: set(before["others"][k]) | set(after["others"][k]) for k in before["others"]
    }
    alone = not others["ids"]
    marks = [*others["ids"], *others["dirs"]]

    def foreign(item: str) -> bool:
        if any(m in item for m in marks) or item.split("@")[0] in others["links"]:
            return True
        if item.strip() in others["routes"]:
            return True
        return not alone and ("KUBE-" in item or item.startswith("/run/containerd"))

    def kept(value: Any) -> Any:
        if isinstance(value, list):
            return [v for v in value if not foreign(str(v))]
        if isinstance(value, str):
            return "\n".join(line for line in value.splitlines() if not foreign(line))
        return value

    out = {}
    for key in before:
        if key == "others" or (key in SHARED and not alone):
            continue
        b, a = kept(before[key]), kept(after.get(key))
        if b != a:
            out[key] = (b, a)
    return out
