"""Take a permission away from elb-gate on the control plane, and give it back.

The webhook and the controller run with exactly the RBAC that ``manifests/`` ships
(:mod:`testbed.install`). These helpers withdraw one verb from a shipped ClusterRole, or
delete a shipped ClusterRoleBinding, wait until the API server's authorizer applies the
change (a SubjectAccessReview says so), and restore the shipped object afterwards::

    with without_verb(cp, "elb-gate-controller", "leases", "patch"):
        ...                                    # the controller's PATCH is a real 403
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

from testbed.api import JsonObj
from testbed.controlplane import ControlPlane
from testbed.install import SYSTEM_NAMESPACE, authorizer_allows, base_objects
from testbed.waiting import wait_until


def allowed(
    cp: ControlPlane,
    service_account: str,
    verb: str,
    resource: str,
    namespace: str | None = None,
    group: str | None = None,
    name: str = "",
) -> bool:
    """Whether the authorizer lets ``service_account`` (of elb-system) do this now, as
    the API server authenticates its token (username, groups)."""
    user = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{service_account}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NAMESPACE}"]
    return authorizer_allows(cp, user, groups, verb, resource, namespace, group, name)


def shipped(kind: str, name: str) -> JsonObj:
    """The object as ``manifests/base`` renders it."""
    for doc in base_objects():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise KeyError(f"manifests/base ships no {kind} {name}")


@contextmanager
def without_verb(
    cp: ControlPlane,
    role: str,
    resource: str,
    verb: str,
    *,
    service_account: str,
    namespace: str | None = None,
) -> Iterator[None]:
    """ClusterRole ``role`` without ``verb`` on ``resource`` (every rule that grants it),
    effective for ``service_account`` in ``namespace`` before the block runs; the shipped
    role is restored (and effective again) afterwards."""
    original = shipped("ClusterRole", role)
    narrowed = copy.deepcopy(original)
    for rule in narrowed["rules"]:
        if resource in rule.get("resources", ()):
            rule["verbs"] = [v for v in rule.get("verbs", ()) if v != verb]
    narrowed["rules"] = [rule for rule in narrowed["rules"] if rule["verbs"]]
    cp.admin.apply(narrowed)
    with _withdrawn(cp, original, service_account, verb, resource, namespace):
        yield


@contextmanager
def without_binding(
    cp: ControlPlane, binding: str, *, service_account: str, verb: str, resource: str
) -> Iterator[None]:
    """ClusterRoleBinding ``binding`` deleted (``service_account`` no longer may ``verb``
    ``resource`` cluster-wide); the shipped binding is restored afterwards."""
    original = shipped("ClusterRoleBinding", binding)
    cp.admin.delete("clusterrolebindings", None, binding)
    with _withdrawn(cp, original, service_account, verb, resource):
        yield


@contextmanager
def _withdrawn(
    cp: ControlPlane,
    original: JsonObj,
    service_account: str,
    verb: str,
    resource: str,
    namespace: str | None = None,
) -> Iterator[None]:
    """Once the authorizer denies what was just withdrawn, the block; then ``original``
    applied again, and waited for until the authorizer allows it again."""

    def may() -> bool:
        return allowed(cp, service_account, verb, resource, namespace)

    try:
        wait_until(lambda: not may(), 120, f"{service_account} loses {verb} {resource}")
        yield
    finally:
        cp.admin.apply(original)
        wait_until(may, 120, f"{service_account} may {verb} {resource} again")
