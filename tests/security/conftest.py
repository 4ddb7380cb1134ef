"""Fixtures of the security tests on the real control plane.

The identities are the control plane's own users, mapped the way an operator maps
the two submit paths: the dashboard takes the Lease as ``dashboard-lease`` and
applies Jobs as ``dashboard-apply`` (group ``dashboard``); the OpenAPI service is
``alice``. ``mallory`` and ``carol`` are outside the map. Everything the chart
installs for that map is rendered from the chart itself and applied as the
operator would; the webhook reads the same map from the chart's ConfigMap.
"""

from __future__ import annotations

import http.client
import json
import ssl
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from testbed import elastic_blast as elb
from testbed.api import ApiError, JsonObj
from testbed.controlplane import ControlPlane
from testbed.install import SYSTEM_NAMESPACE
from testbed.webhook_process import WebhookProcess
from tests.builders import admission, review, user
from tests.install.chart import render

SUBMITTERS: list[dict[str, Any]] = [
    {
        "name": "dashboard",
        "holderPrefix": "dashboard-",
        "users": ["dashboard-lease"],
        "groups": ["dashboard"],
    },
    {"name": "openapi", "holderPrefix": "openapi-", "users": ["alice"]},
]
ACCESS_KINDS = {
    "ClusterRole": "clusterroles",
    "RoleBinding": "rolebindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
ACCESS_NAMES = {
    "elb-gate-submitter",
    "elb-gate-in-cluster-submit",
    "elb-gate-submitters",
    "elb-gate-search-jobs",
}


def chart(namespace: str, values: Mapping[str, Any] | None = None) -> list[JsonObj]:
    """The chart's objects with the tests' submitter map, gating ``namespace`` by name."""
    return render({"submitters": SUBMITTERS, "gatedNamespaces": [namespace], **(values or {})})


def identities_file(namespace: str, directory: Path) -> str:
    """The submitter map as the chart ships it to the webhook (its ConfigMap), as a file."""
    configmap = next(o for o in chart(namespace) if o["metadata"]["name"] == "elb-gate-submitters")
    path = directory / "submitters.yaml"
    path.write_text(configmap["data"]["submitters.yaml"])
    return str(path)


@contextmanager
def submitter_access(
    cp: ControlPlane, namespace: str, values: Mapping[str, Any]
) -> Iterator[list[JsonObj]]:
    """Apply what the chart's ``submitterAccess`` values render (RBAC, admission policy)
    for ``namespace``; remove it afterwards (the policy is cluster-wide)."""
    objects = [
        o
        for o in chart(namespace, values)
        if o["kind"] in ACCESS_KINDS and o["metadata"]["name"] in ACCESS_NAMES
    ]
    # A binding before its policy would bind nothing for a moment: policy first.
    objects.sort(key=lambda o: o["kind"].endswith("Binding"))
    for obj in objects:
        cp.admin.apply(obj)
    try:
        yield objects
    finally:
        for obj in reversed(objects):
            if obj["kind"] == "ClusterRole":
                continue  # shared by every namespace that uses it
            meta = obj["metadata"]
            cp.admin.delete(ACCESS_KINDS[obj["kind"]], meta.get("namespace"), meta["name"])


@contextmanager
def webhook(
    cp: ControlPlane, workdir: Path, namespace: str, env: Mapping[str, str] | None = None
) -> Iterator[WebhookProcess]:
    """The webhook with the tests' submitter map (and ``env``), registered for the duration."""
    pod = f"elb-gate-webhook-{uuid.uuid4().hex[:6]}"
    settings = {"ELB_GATE_SUBMITTER_IDENTITIES_FILE": identities_file(namespace, workdir)}
    try:
        with WebhookProcess(cp, {**settings, **(env or {})}, pod=pod) as hook:
            yield hook
    finally:
        cp.admin.delete("pods", SYSTEM_NAMESPACE, pod, grace_seconds=0)


def job(
    namespace: str, body: dict[str, Any], name: str | None = None, app: str | None = None
) -> str:
    """An ElasticBLAST Job body ready for ``namespace`` (JSON for ``kubectl create -f -``),
    renamed and relabelled when asked."""
    out = elb.ready(body, namespace)
    if name:
        out["metadata"]["name"] = name
    if app:
        out["metadata"]["labels"]["app"] = app
        out["spec"]["template"]["metadata"]["labels"]["app"] = app
    return json.dumps(out)


def finalizer(namespace: str, job_id: str, name: str | None = None, app: str | None = None) -> str:
    """The finalizer Job of search ``job_id`` (the first Job of a direct-mode search)."""
    return job(namespace, elb.finalizer(job_id), name, app)


def policy_refuses(cp: ControlPlane, namespace: str, user: str = "mallory") -> bool:
    """Whether the admission policy refuses ``user``'s search Job now (a server-side dry
    run: the API server applies a new policy from its informer a moment after the write)."""
    body = json.loads(finalizer(namespace, elb.search_id(0), "policy-probe"))
    try:
        cp.api(user).create(body, dryRun="All")
    except ApiError as exc:
        return "ValidatingAdmissionPolicy 'elb-gate-search-jobs'" in exc.message
    return False


def admission_review(
    namespace: str, username: str, body: str, groups: tuple[str, ...] = ()
) -> bytes:
    """The AdmissionReview the API server sends for ``username`` creating Job ``body``:
    what any pod can write by hand."""
    who = user(username, (*groups, "system:authenticated"))
    request = admission("CREATE", json.loads(body), who=who, namespace=namespace)
    return json.dumps(review(replace(request, uid=str(uuid.uuid4())))).encode()


def post_directly(
    hook: WebhookProcess, path: str, body: bytes, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, Any]]:
    """POST to the webhook's admission port as a pod would, bypassing the API server."""
    connection = http.client.HTTPSConnection(
        "127.0.0.1", hook.port, context=context or hook.client_context(), timeout=30
    )
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def sample(hook: WebhookProcess, name: str, **labels: str) -> float:
    """The value of one series of the webhook's /metrics (0 when absent)."""
    return hook.metric(name, labels) or 0.0
