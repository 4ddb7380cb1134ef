"""Registration on the real API server, as the controller's ServiceAccount with the RBAC
the chart ships for ``webhook.registration=controller``: nothing is registered until the
webhook Service has a ready endpoint; then both configurations are created, owned by the
release's ClusterRole (the garbage collector removes them with it); a chart change
updates them keeping the live caBundle; ``unregister`` removes the ConfigMap and both.

The test's configurations have names of their own and match no namespace, so the
session's registered webhook is untouched: the one change to the shipped RBAC is those
names in resourceNames (configurations and owner)."""

from __future__ import annotations

import base64
import copy
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from controller.registration import DIGEST, Registrar, unregister
from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from testbed.api import JsonObj
from testbed.controlplane import ControlPlane
from testbed.install import SYSTEM_NAMESPACE, Installation
from testbed.rbac import allowed
from testbed.waiting import wait_until
from tests.install.chart import REGISTRATION_CONFIGMAP, render

KINDS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
BUNDLE = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")


@pytest.fixture(scope="module")
def names() -> dict[str, str]:
    tag = uuid.uuid4().hex[:6]
    return {"config": f"elb-gate-r{tag}", "owner": f"elb-gate-r{tag}-owner", "service": f"r{tag}"}


def _rbac(names: dict[str, str]) -> list[JsonObj]:
    out = []
    for o in render({}, raw=True):
        if o["kind"] not in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
            continue
        if o["metadata"]["name"] != "elb-gate-controller-registration":
            continue
        o = copy.deepcopy(o)
        for rule in o.get("rules") or []:
            if rule.get("resourceNames") == ["elb-gate"]:
                rule["resourceNames"] = [names["config"]]
            if rule.get("resourceNames") == ["elb-gate-webhook"]:
                rule["resourceNames"] = [names["owner"]]
        out.append(o)
    assert len(out) == 4
    return out


def _source(names: dict[str, str], timeout: int = 5) -> JsonObj:
    """The chart's ConfigMap, its configurations renamed and matching no namespace."""
    [cm] = [
        o
        for o in render({"webhook.timeoutSeconds": timeout}, raw=True)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == REGISTRATION_CONFIGMAP
    ]
    data = {}
    for key, raw in cm["data"].items():
        obj = json.loads(raw)
        obj["metadata"]["name"] = names["config"]
        for hook in obj["webhooks"]:
            hook["namespaceSelector"] = {"matchLabels": {"elb-gate.io/registration-test": "never"}}
            hook["failurePolicy"] = "Ignore"
        data[key] = json.dumps(obj, sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": REGISTRATION_CONFIGMAP, "namespace": SYSTEM_NAMESPACE},
        "data": data,
    }


def _slice(names: dict[str, str], ready: bool) -> JsonObj:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{names['service']}-1",
            "namespace": SYSTEM_NAMESPACE,
            "labels": {"kubernetes.io/service-name": names["service"]},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.255.0.9"], "conditions": {"ready": ready}}],
        "ports": [{"name": "https", "port": 8443, "protocol": "TCP"}],
    }


@pytest.fixture(scope="module")
def shipped(control_plane: ControlPlane, names: dict[str, str]) -> Iterator[None]:
    cp = control_plane
    Installation.on(cp)
    objs = _rbac(names)
    for o in objs:
        cp.admin.apply(o)
    wait_until(
        lambda: (
            allowed(
                cp,
                "elb-gate-controller",
                "get",
                "configmaps",
                SYSTEM_NAMESPACE,
                "",
                REGISTRATION_CONFIGMAP,
            )
            and allowed(
                cp,
                "elb-gate-controller",
                "get",
                "clusterroles",
                None,
                "rbac.authorization.k8s.io",
                names["owner"],
            )
        ),
        60,
        "the registration RBAC in force",
    )
    yield
    for kind in KINDS:
        if cp.admin.find(kind, None, names["config"]):
            cp.admin.delete(kind, None, names["config"])
    for what, ns, name in (
        ("configmaps", SYSTEM_NAMESPACE, REGISTRATION_CONFIGMAP),
        ("endpointslices", SYSTEM_NAMESPACE, f"{names['service']}-1"),
        ("clusterroles", None, names["owner"]),
    ):
        if cp.admin.find(what, ns, name):
            cp.admin.delete(what, ns, name)
    for o in objs:
        cp.admin.delete(
            o["kind"].lower() + "s", o["metadata"].get("namespace"), o["metadata"]["name"]
        )


@pytest.fixture
async def api(control_plane: ControlPlane, shipped: None) -> AsyncIterator[KubeApi]:
    identity = Installation.on(control_plane).identity("controller", "controller-registration")
    async with KubeApi(KubeConfig.load(identity.kubeconfig), timeout=5.0) as api:
        yield api


def _settings(names: dict[str, str]) -> Settings:
    return Settings.of(
        registration_configmap=REGISTRATION_CONFIGMAP,
        registration_owner=names["owner"],
        cert_service=names["service"],
        webhook_configuration=names["config"],
    )


def _live(cp: ControlPlane, names: dict[str, str]) -> dict[str, Any]:
    return {kind: cp.admin.find(kind, None, names["config"]) for kind in KINDS}


async def test_registered_only_once_an_endpoint_is_ready_then_updated_then_unregistered(
    control_plane: ControlPlane, api: KubeApi, names: dict[str, str]
) -> None:
    cp = control_plane
    owner = cp.admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": names["owner"]},
            "rules": [],
        }
    )

    async def bundle() -> str:
        return BUNDLE.decode()

    registrar = Registrar(api, SYSTEM_NAMESPACE, _settings(names).controller, ca_bundle=bundle)
    assert await registrar.sync() == "no configurations to register"
    cp.admin.apply(_source(names))
    # No endpoint, then one that is not ready: nothing registered.
    assert await registrar.sync() == "waiting for a ready endpoint of the webhook Service"
    cp.admin.apply(_slice(names, ready=False))
    assert await registrar.sync() == "waiting for a ready endpoint of the webhook Service"
    assert _live(cp, names) == dict.fromkeys(KINDS)

    cp.admin.apply(_slice(names, ready=True))
    assert await registrar.sync() == "registered"
    live = _live(cp, names)
    for kind in KINDS:
        obj = live[kind]
        assert obj is not None, kind
        [ref] = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == (
            "ClusterRole",
            names["owner"],
            owner["metadata"]["uid"],
        )
        assert DIGEST in obj["metadata"]["annotations"]
        assert {h["clientConfig"]["caBundle"] for h in obj["webhooks"]} == {BUNDLE.decode()}
        assert {h["timeoutSeconds"] for h in obj["webhooks"]} == {5}
    rv = {k: v["metadata"]["resourceVersion"] for k, v in live.items()}
    assert await registrar.sync() == "registered"  # nothing changed: no write
    assert {k: v["metadata"]["resourceVersion"] for k, v in _live(cp, names).items()} == rv

    # A chart change (an upgrade) updates both, the live caBundle kept even with no
    # endpoint ready (it is already registered).
    cp.admin.apply(_slice(names, ready=False))
    changed = BUNDLE.decode().replace("MIIB", "MIIC")
    for kind in KINDS:
        obj = _live(cp, names)[kind]
        for hook in obj["webhooks"]:
            hook["clientConfig"]["caBundle"] = changed
        cp.admin.update(obj)
    cp.admin.apply(_source(names, timeout=7))
    assert await registrar.sync() == "registered"
    for obj in _live(cp, names).values():
        assert {h["timeoutSeconds"] for h in obj["webhooks"]} == {7}
        assert {h["clientConfig"]["caBundle"] for h in obj["webhooks"]} == {changed}

    # An operator's unregister: ConfigMap and both configurations gone; the leader does
    # not register them again, even with a ready endpoint.
    cp.admin.apply(_slice(names, ready=True))
    assert await unregister(api, SYSTEM_NAMESPACE, _settings(names).controller) == [
        "configmap",
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ]
    assert await registrar.sync() == "no configurations to register"
    assert _live(cp, names) == dict.fromkeys(KINDS)
    assert await unregister(api, SYSTEM_NAMESPACE, _settings(names).controller) == []


async def test_the_garbage_collector_removes_them_with_their_owner(
    control_plane: ControlPlane, api: KubeApi, names: dict[str, str]
) -> None:
    cp = control_plane
    cp.admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": names["owner"]},
            "rules": [],
        }
    )
    cp.admin.apply(_source(names))
    cp.admin.apply(_slice(names, ready=True))
    registrar = Registrar(api, SYSTEM_NAMESPACE, _settings(names).controller)
    assert await registrar.sync() == "registered"
    assert all(_live(cp, names).values())
    cp.admin.delete("clusterroles", None, names["owner"])
    wait_until(
        lambda: _live(cp, names) == dict.fromkeys(KINDS),
        120,
        "both configurations removed by the garbage collector",
    )
    # With the owner gone nothing is registered again.
    assert await registrar.sync() == f"owner ClusterRole {names['owner']} absent: not registering"
    cp.admin.delete("configmaps", SYSTEM_NAMESPACE, REGISTRATION_CONFIGMAP)
