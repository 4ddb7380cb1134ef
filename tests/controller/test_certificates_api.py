"""Managed certificates on the real API server, as the controller's ServiceAccount with
the RBAC the chart ships for ``certificates.source=managed``: the first pass makes the
CA, the serving pair and the caBundle; a serving renewal leaves the caBundle alone; a
CA rotation walks add → publish → wait → issue → wait → drop → publish, each write a
compare-and-swap, with the bundle verifying the stored serving certificate throughout.

The clock is the test's (the planner's decisions are about time; the API writes are
real). The configurations are the test's own (a name of their own, matching no
namespace), so the session's registered webhook is untouched: the one change to the
shipped RBAC is that name in the ClusterRole's resourceNames."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from cryptography import x509

from certs import builder
from controller.certificates import PUBLISHED, Action, CertificateManager, digest
from elbgate.kube.api import ApiError, KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.settings import Settings
from testbed.api import JsonObj
from testbed.controlplane import ControlPlane
from testbed.install import SYSTEM_NAMESPACE, Installation
from testbed.rbac import allowed
from testbed.waiting import wait_until
from tests.install.chart import render

T0 = dt.datetime(2031, 3, 1, 12, 0, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)
KINDS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture(scope="module")
def names() -> dict[str, str]:
    tag = uuid.uuid4().hex[:6]
    return {"tls": f"t{tag}-tls", "ca": f"t{tag}-ca", "config": f"elb-gate-t{tag}"}


def _shipped_rbac(names: dict[str, str]) -> list[JsonObj]:
    objs = render(
        {"certificates.secretName": names["tls"], "certificates.managed.caSecretName": names["ca"]}
    )
    out = []
    for o in objs:
        if o["kind"] not in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
            continue
        name = o["metadata"]["name"]
        if not ("certificate" in name or "webhook-configurations" in name):
            continue
        o = copy.deepcopy(o)
        if o["kind"] == "ClusterRole":
            assert o["rules"][0]["resourceNames"] == ["elb-gate"]
            o["rules"][0]["resourceNames"] = [names["config"]]
        out.append(o)
    assert len(out) == 6, [o["metadata"]["name"] for o in out]
    return out


def _configuration(kind: str, name: str) -> JsonObj:
    hook: JsonObj = {
        "name": "probe.certs-test.elb-gate.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Ignore",
        "timeoutSeconds": 1,
        "clientConfig": {"url": "https://127.0.0.1:9/never"},
        "namespaceSelector": {"matchLabels": {"elb-gate.io/certs-test": "never"}},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["configmaps"],
                "operations": ["CREATE"],
            }
        ],
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": {
            "validatingwebhookconfigurations": "ValidatingWebhookConfiguration",
            "mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
        }[kind],
        "metadata": {"name": name},
        "webhooks": [hook, {**hook, "name": "second.certs-test.elb-gate.io"}],
    }


@pytest.fixture(scope="module")
def managed_rbac(control_plane: ControlPlane, names: dict[str, str]) -> Iterator[None]:
    Installation.on(control_plane)
    objs = _shipped_rbac(names)
    for o in objs:
        control_plane.admin.apply(o)
    for kind in KINDS:
        control_plane.admin.create(_configuration(kind, names["config"]))
    wait_until(
        lambda: (
            allowed(
                control_plane,
                "elb-gate-controller",
                "update",
                "secrets",
                SYSTEM_NAMESPACE,
                "",
                names["ca"],
            )
            and allowed(
                control_plane,
                "elb-gate-controller",
                "update",
                KINDS[1],
                None,
                "admissionregistration.k8s.io",
                names["config"],
            )
            and allowed(
                control_plane,
                "elb-gate-webhook",
                "get",
                "secrets",
                SYSTEM_NAMESPACE,
                "",
                names["tls"],
            )
        ),
        60,
        "the managed-certificate RBAC in force",
    )
    yield
    for kind in KINDS:
        control_plane.admin.delete(kind, None, names["config"])
    for secret in (names["ca"], names["tls"]):
        if control_plane.admin.find("secrets", SYSTEM_NAMESPACE, secret):
            control_plane.admin.delete("secrets", SYSTEM_NAMESPACE, secret)
    for o in objs:
        control_plane.admin.delete(
            o["kind"].lower() + "s", o["metadata"].get("namespace"), o["metadata"]["name"]
        )


@pytest.fixture
async def api(control_plane: ControlPlane, managed_rbac: None) -> AsyncIterator[KubeApi]:
    identity = Installation.on(control_plane).identity("controller", "controller-certs-test")
    async with KubeApi(KubeConfig.load(identity.kubeconfig), timeout=5.0) as api:
        yield api


def _manager(api: KubeApi, names: dict[str, str], clock: Clock) -> CertificateManager:
    settings = Settings.of(
        certificates="managed",
        tls_secret=names["tls"],
        cert_ca_secret=names["ca"],
        webhook_configuration=names["config"],
        cert_ca_seconds=120,
        cert_serving_seconds=50,
        cert_renew_fraction=0.5,
        cert_overlap_seconds=5,
    )
    return CertificateManager(
        api, SYSTEM_NAMESPACE, settings.controller, settings.webhook.tls_secret, clock=clock
    )


def _stored(cp: ControlPlane, names: dict[str, str]) -> dict[str, Any]:
    def data(name: str, key: str) -> bytes:
        return base64.b64decode(cp.admin.get("secrets", SYSTEM_NAMESPACE, name)["data"][key])

    bundles = []
    for kind in KINDS:
        hooks = cp.admin.get(kind, None, names["config"])["webhooks"]
        assert len({h["clientConfig"].get("caBundle") for h in hooks}) == 1
        bundles.append(base64.b64decode(hooks[0]["clientConfig"]["caBundle"]))
    assert bundles[0] == bundles[1]
    return {
        "cas": x509.load_pem_x509_certificates(data(names["ca"], "ca.crt")),
        "leaf": x509.load_pem_x509_certificate(data(names["tls"], "tls.crt")),
        "bundle": x509.load_pem_x509_certificates(bundles[0]),
        "ca_secret": cp.admin.get("secrets", SYSTEM_NAMESPACE, names["ca"]),
    }


def _trusted(state: dict[str, Any]) -> bool:
    return any(builder.issued_by(state["leaf"], ca) for ca in state["bundle"])


async def test_first_pass_then_a_serving_renewal_then_a_ca_rotation(
    control_plane: ControlPlane, api: KubeApi, names: dict[str, str]
) -> None:
    cp, clock = control_plane, Clock()
    mgr = _manager(api, names, clock)

    step = await mgr.sync()
    assert step.action is Action.KEEP, step
    first = _stored(cp, names)
    [ca] = first["cas"]
    assert first["bundle"] == [ca] and builder.issued_by(first["leaf"], ca)
    assert sorted(builder.dns_names_of(first["leaf"])) == sorted(
        builder.service_dns_names("elb-gate-webhook", SYSTEM_NAMESPACE)
    )
    assert first["ca_secret"]["metadata"]["annotations"][PUBLISHED].startswith(digest([ca]) + "@")
    # The webhook may read the serving pair, never the CA key.
    assert allowed(cp, "elb-gate-webhook", "get", "secrets", SYSTEM_NAMESPACE, "", names["tls"])
    assert not allowed(cp, "elb-gate-webhook", "get", "secrets", SYSTEM_NAMESPACE, "", names["ca"])

    # A second pass at the same time changes nothing.
    rv = first["ca_secret"]["metadata"]["resourceVersion"]
    assert (await mgr.sync()).action is Action.KEEP
    assert (
        cp.admin.get("secrets", SYSTEM_NAMESPACE, names["ca"])["metadata"]["resourceVersion"] == rv
    )

    # Serving renewal at half its life: a new leaf, same CA, same caBundle.
    clock.now = T0 + 30 * SECOND
    assert (await mgr.sync()).action is Action.KEEP
    renewed = _stored(cp, names)
    assert renewed["leaf"] != first["leaf"] and builder.issued_by(renewed["leaf"], ca)
    assert renewed["bundle"] == [ca]

    # CA rotation at half the CA's life: both CAs published, the old leaf still served.
    clock.now = T0 + 60 * SECOND
    step = await mgr.sync()
    assert step.action is Action.WAIT and step.at == clock.now + 5 * SECOND, step
    adding = _stored(cp, names)
    old, new = adding["cas"]
    assert old == ca and adding["bundle"] == [old, new]
    assert adding["leaf"] == renewed["leaf"] and _trusted(adding)

    # After the overlap: a leaf of the new CA; the old CA stays trusted for another overlap.
    clock.now += 5 * SECOND
    step = await mgr.sync()
    assert step.action is Action.WAIT and "older CAs stay trusted" in step.reason, step
    issuing = _stored(cp, names)
    assert builder.issued_by(issuing["leaf"], new) and issuing["bundle"] == [old, new]

    clock.now += 5 * SECOND
    assert (await mgr.sync()).action is Action.KEEP
    done = _stored(cp, names)
    assert done["cas"] == [new] and done["bundle"] == [new] and _trusted(done)
    assert done["leaf"] == issuing["leaf"]


async def test_a_caBundle_changed_behind_its_back_is_put_back(
    control_plane: ControlPlane, api: KubeApi, names: dict[str, str]
) -> None:
    cp, clock = control_plane, Clock()
    clock.now = T0 + 70 * SECOND
    mgr = _manager(api, names, clock)
    await mgr.sync()
    before = _stored(cp, names)
    stranger = builder.new_ca(clock.now, lifetime=dt.timedelta(hours=1))
    config = cp.admin.get(KINDS[0], None, names["config"])
    for hook in config["webhooks"]:
        hook["clientConfig"]["caBundle"] = base64.b64encode(stranger.cert_pem()).decode()
    cp.admin.update(config)
    assert (await mgr.sync()).action is Action.KEEP
    after = _stored(cp, names)
    assert after["bundle"] == before["bundle"] and after["leaf"] == before["leaf"]


async def test_a_rival_write_between_read_and_write_is_a_conflict_not_a_lost_update(
    control_plane: ControlPlane, api: KubeApi, names: dict[str, str]
) -> None:
    cp, clock = control_plane, Clock()
    clock.now = T0 + 71 * SECOND
    mgr = _manager(api, names, clock)
    await mgr.sync()
    _obs, secrets, _configs = await mgr.read()
    stale = secrets["ca"]
    # Another leader wrote meanwhile.
    current = cp.admin.get("secrets", SYSTEM_NAMESPACE, names["ca"])
    current["metadata"].setdefault("annotations", {})["rival"] = "1"
    cp.admin.update(current)
    with pytest.raises(ApiError) as err:
        await mgr._write(stale, names["ca"], {"ca.crt": b"x", "ca.key": b"y"}, None)
    assert err.value.conflict
    assert (await mgr.sync()).action is Action.KEEP
    assert _trusted(_stored(cp, names))
