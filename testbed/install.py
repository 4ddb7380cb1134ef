"""Install elb-gate's own cluster objects on the control plane, from the shipped manifests.

What a real install creates around the two Deployments — the ``elb-system``
namespace, the ServiceAccounts, the ClusterRoles and their bindings, the
RoleBindings of each gated namespace — is applied here exactly as
``manifests/`` renders it (``kubectl kustomize``, the pinned kubectl), so the
webhook and the controller run with exactly the permissions an operator
grants them: a missing verb is a real 403.

The processes themselves run on the host (no container runtime), each with a
token of its ServiceAccount bound to a Pod object of its own in ``elb-system``,
as the kubelet would project it.
"""

from __future__ import annotations

import functools
import subprocess
import threading
from pathlib import Path

import yaml

from elbgate.names import CENSUS_FENCE_APP
from testbed.api import JsonObj
from testbed.controlplane import (
    NAMED_USERS,
    REPO,
    ControlPlane,
    PodIdentity,
    kubectl_path,
)
from testbed.waiting import wait_until

SYSTEM_NAMESPACE = "elb-system"
WEBHOOK_SA = "elb-gate-webhook"
CONTROLLER_SA = "elb-gate-controller"
GATED_LABEL = "elb-gate.io/gated"
_BASE_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
}
_lock = threading.Lock()

SUBMITTER_ROLE = "elb-gate-testbed-submitter"
POOL_GROUP = "team"
"""The group of the pool users ``user-NNN`` (:meth:`ControlPlane.plain_user`)."""
SUBMITTER_RULES = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods", "configmaps", "events", "namespaces"],
        "verbs": ["get", "list", "watch"],
    },
]
"""What ElasticBLAST's submitters do in a gated namespace. The testbed grants it to
every submitter there (:func:`submitter_subjects`), as a cluster that does not
restrict who may create Jobs does (see docs/security.md for the RBAC that does
restrict it)."""


SUBMITTER_CLUSTER_ROLE: JsonObj = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": SUBMITTER_ROLE},
    "rules": SUBMITTER_RULES,
}


def submitter_binding(namespace: str, subjects: list[JsonObj]) -> JsonObj:
    """The RoleBinding that grants :data:`SUBMITTER_RULES` to ``subjects`` in ``namespace``."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": SUBMITTER_ROLE, "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": SUBMITTER_ROLE,
        },
        "subjects": subjects,
    }


def submitter_subjects(namespace: str) -> list[JsonObj]:
    """Who may submit in a gated namespace: every token-file user (by group, or by name
    when it has none) and the namespace's own ServiceAccounts (in-cluster submitters,
    the in-cluster submit Job). Not ``system:authenticated``: that would also grant the
    webhook's and the controller's ServiceAccounts, and hide a verb missing from the
    RBAC elb-gate ships."""
    groups = sorted({g for _name, gs in NAMED_USERS for g in gs} | {POOL_GROUP})
    loners = sorted(name for name, gs in NAMED_USERS if not gs)
    rbac = "rbac.authorization.k8s.io"
    return [
        *({"apiGroup": rbac, "kind": "Group", "name": g} for g in groups),
        *({"apiGroup": rbac, "kind": "User", "name": u} for u in loners),
        {"apiGroup": rbac, "kind": "Group", "name": f"system:serviceaccounts:{namespace}"},
    ]


def render(path: Path) -> list[JsonObj]:
    """``kubectl kustomize <path>`` with the pinned kubectl, as documents."""
    out = subprocess.run(
        [str(kubectl_path()), "kustomize", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path}: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def base_objects() -> list[JsonObj]:
    """The namespace, ServiceAccounts and RBAC of ``manifests/base`` (no workloads,
    no webhook configurations: the testbed registers those itself)."""
    docs = render(REPO / "manifests" / "base")
    return [
        d
        for d in docs
        if d.get("kind") in _BASE_KINDS
        and not (d["kind"] == "RoleBinding" and d["metadata"].get("namespace") == "default")
    ]


def gated_namespace_bindings(namespace: str) -> list[JsonObj]:
    """What ``manifests/gated-namespace-bindings`` gives one gated namespace: its
    RoleBindings and its census fence Job."""
    docs: list[JsonObj] = []
    for file in ("rolebindings.yaml", "census-fence.yaml"):
        text = (REPO / "manifests" / "gated-namespace-bindings" / file).read_text()
        docs += [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return docs


CENSUS_FENCE_JOB = next(
    str(d["metadata"]["name"]) for d in gated_namespace_bindings("") if d["kind"] == "Job"
)
"""The census fence Job's name as shipped (``ELB_GATE_CENSUS_FENCE_JOB``)."""
NOT_THE_FENCE = f"app!={CENSUS_FENCE_APP}"
"""labelSelector of every Job of a gated namespace but its census fence: what a harness
clears between runs (the install made the fence once; without it the webhook reads the
census with a LIST)."""


class Installation:
    """elb-gate's objects on one control plane (installed once per control plane)."""

    _installed: dict[str, Installation] = {}

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self._identities: dict[str, PodIdentity] = {}
        self._gated: set[str] = set()

    @classmethod
    def on(cls, cp: ControlPlane) -> Installation:
        """The installation on ``cp``, applying the manifests the first time."""
        with _lock:
            found = cls._installed.get(cp.server)
            if found is None:
                for doc in base_objects():
                    cp.admin.apply(doc)
                cp.ensure_namespace(SYSTEM_NAMESPACE)
                cp.admin.apply(SUBMITTER_CLUSTER_ROLE)
                found = cls._installed[cp.server] = cls(cp)
            return found

    def gate(self, namespace: str, *, label: bool = True, open_to_all: bool = True) -> str:
        """Make ``namespace`` a gated namespace: created, its RoleBindings applied,
        labelled ``elb-gate.io/gated=true`` (unless ``label=False``), and (unless
        ``open_to_all=False``) every submitter allowed to submit there."""
        self.cp.ensure_namespace(namespace, {GATED_LABEL: "true"} if label else None)
        if namespace not in self._gated:
            for doc in gated_namespace_bindings(namespace):
                if doc["kind"] == "Job":  # its pod template cannot change: made once
                    self.cp.admin.create_once(doc)
                else:
                    self.cp.admin.apply(doc)
            if open_to_all:
                self.cp.admin.apply(submitter_binding(namespace, submitter_subjects(namespace)))
            self._await_bindings(namespace, open_to_all)
            self._gated.add(namespace)
        return namespace

    def _await_bindings(self, namespace: str, open_to_all: bool) -> None:
        """Wait until the API server's authorizer applies the RoleBindings just written.

        RBAC decisions come from the API server's informer cache, which sees a new
        RoleBinding a moment after the write is answered: a submitter's first request
        right after :meth:`gate` would otherwise be a 403 the cluster gives no one a
        second later. A SubjectAccessReview goes through the same authorizer."""
        checks: list[tuple[str, list[str], str, str]] = [
            (f"system:serviceaccount:{SYSTEM_NAMESPACE}:{WEBHOOK_SA}", [], "list", "jobs"),
            (f"system:serviceaccount:{SYSTEM_NAMESPACE}:{CONTROLLER_SA}", [], "patch", "leases"),
        ]
        if open_to_all:
            first, its_groups = NAMED_USERS[0]
            checks.append((first, list(its_groups), "create", "leases"))
        for user, groups, verb, resource in checks:
            allowed = functools.partial(
                authorizer_allows, self.cp, user, groups, verb, resource, namespace
            )
            wait_until(allowed, 60, f"RBAC to let {user} {verb} {resource} in {namespace}", 0.05)

    def identity(self, component: str, pod: str) -> PodIdentity:
        """A token of ``component``'s ServiceAccount bound to a Pod named ``pod``."""
        key = f"{component}/{pod}"
        if key not in self._identities:
            sa = {"webhook": WEBHOOK_SA, "controller": CONTROLLER_SA}[component]
            self._identities[key] = self.cp.pod_identity(SYSTEM_NAMESPACE, sa, pod=pod)
        return self._identities[key]


def authorizer_allows(
    cp: ControlPlane,
    user: str,
    groups: list[str],
    verb: str,
    resource: str,
    namespace: str | None = None,
    group: str | None = None,
    name: str = "",
) -> bool:
    """Whether the API server's authorizer lets ``user`` (of ``groups``, authenticated)
    do ``verb`` on ``resource`` (of API ``group``: by default the one elb-gate uses it
    from), in ``namespace`` or cluster-wide, named ``name`` or any, now (a
    SubjectAccessReview)."""
    if group is None:
        group = {"leases": "coordination.k8s.io", "jobs": "batch"}.get(resource, "")
    # An empty namespace or name is none (Go's zero value): cluster-wide, any name.
    attributes = {"verb": verb, "resource": resource, "group": group, "name": name}
    spec = {
        "user": user,
        "groups": list(dict.fromkeys([*groups, "system:authenticated"])),
        "resourceAttributes": {**attributes, "namespace": namespace or ""},
    }
    review = cp.admin.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
    )
    return bool(review["status"].get("allowed"))
