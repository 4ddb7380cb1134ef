"""Managed certificates, the webhook's side: the serving pair read from its Secret
through the API (as the webhook's ServiceAccount, with the Role the chart ships for
``certificates.source=managed``) and served to new handshakes within a poll of the
Secret's change; an unreadable or half-written Secret keeps the pair in service."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from cryptography import x509

from certs import builder
from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig
from testbed.controlplane import ControlPlane
from testbed.install import SYSTEM_NAMESPACE, Installation
from testbed.rbac import allowed
from testbed.waiting import wait_until
from tests.install.chart import render
from webhook.tls import ServingCertificate, secret_fetcher

NOW = dt.datetime.now(dt.UTC)
NAMES = builder.service_dns_names("elb-gate-webhook", SYSTEM_NAMESPACE)


@pytest.fixture(scope="module")
def secret_name(control_plane: ControlPlane) -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:6]}-tls"
    Installation.on(control_plane)
    objs = [
        o
        for o in render({"certificates.secretName": name})
        if o["kind"] in ("Role", "RoleBinding")
        and o["metadata"]["name"] == "elb-gate-webhook-certificate"
    ]
    assert len(objs) == 2
    for o in objs:
        control_plane.admin.apply(o)
    wait_until(
        lambda: allowed(
            control_plane, "elb-gate-webhook", "get", "secrets", SYSTEM_NAMESPACE, "", name
        ),
        60,
        "the webhook's Secret Role in force",
    )
    yield name
    if control_plane.admin.find("secrets", SYSTEM_NAMESPACE, name):
        control_plane.admin.delete("secrets", SYSTEM_NAMESPACE, name)
    for o in objs:
        control_plane.admin.delete(o["kind"].lower() + "s", SYSTEM_NAMESPACE, o["metadata"]["name"])


@pytest.fixture
async def api(control_plane: ControlPlane, secret_name: str) -> AsyncIterator[KubeApi]:
    identity = Installation.on(control_plane).identity("webhook", "webhook-secret-source")
    async with KubeApi(KubeConfig.load(identity.kubeconfig), timeout=5.0) as api:
        yield api


def _write(cp: ControlPlane, name: str, leaf: builder.KeyPair, key: bytes | None = None) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": base64.b64encode(leaf.cert_pem()).decode(),
            "tls.key": base64.b64encode(key if key is not None else leaf.key_pem()).decode(),
        },
    }
    cp.admin.apply(body)


async def _served(port: int, ca: builder.KeyPair) -> x509.Certificate:
    ctx = ssl.create_default_context(cadata=ca.cert_pem().decode())
    _r, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=NAMES[2])
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der)


async def test_the_pair_comes_from_the_secret_and_a_rewrite_is_served_without_restart(
    control_plane: ControlPlane, api: KubeApi, secret_name: str
) -> None:
    cp = control_plane
    ca = builder.new_ca(NOW, lifetime=dt.timedelta(hours=2))
    first = builder.new_serving(ca, NAMES, NOW, lifetime=dt.timedelta(hours=1))
    loaded: list[dt.datetime] = []
    cert = ServingCertificate(
        f"Secret {SYSTEM_NAMESPACE}/{secret_name}",
        "",
        on_loaded=loaded.append,
        fetch=secret_fetcher(api, SYSTEM_NAMESPACE, secret_name),
    )
    # Before the controller has written it: nothing loaded (not Ready), no crash.
    if cp.admin.find("secrets", SYSTEM_NAMESPACE, secret_name):
        cp.admin.delete("secrets", SYSTEM_NAMESPACE, secret_name)
    assert await cert.refresh() is False and not cert.loaded

    _write(cp, secret_name, first)
    assert await cert.refresh() is True and cert.loaded
    assert loaded == [first.cert.not_valid_after_utc]
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=cert.context)
    port = server.sockets[0].getsockname()[1]
    watch = asyncio.create_task(cert.watch(interval=0.2))
    try:
        assert (await _served(port, ca)).serial_number == first.cert.serial_number

        second = builder.new_serving(ca, NAMES, NOW, lifetime=dt.timedelta(hours=1))
        _write(cp, secret_name, second)

        for _ in range(300):  # up to 30 s: a poll is 0.2 s
            if (await _served(port, ca)).serial_number == second.cert.serial_number:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the rewritten pair was never served")

        # A pair whose key does not match (a half-done write) is refused; the one in
        # service stays.
        third = builder.new_serving(ca, NAMES, NOW, lifetime=dt.timedelta(hours=1))
        _write(cp, secret_name, third, key=first.key_pem())
        await asyncio.sleep(1.0)
        assert (await _served(port, ca)).serial_number == second.cert.serial_number
    finally:
        watch.cancel()
        server.close()
        await server.wait_closed()


async def test_a_secret_it_may_not_read_keeps_the_pair_in_service(
    control_plane: ControlPlane, api: KubeApi, secret_name: str
) -> None:
    ca = builder.new_ca(NOW, lifetime=dt.timedelta(hours=2))
    leaf = builder.new_serving(ca, NAMES, NOW, lifetime=dt.timedelta(hours=1))
    _write(control_plane, secret_name, leaf)
    cert = ServingCertificate("x", "", fetch=secret_fetcher(api, SYSTEM_NAMESPACE, secret_name))
    assert await cert.refresh()
    forbidden = ServingCertificate(
        "y", "", fetch=secret_fetcher(api, SYSTEM_NAMESPACE, "elb-gate-webhook-ca")
    )
    assert await forbidden.refresh() is False and not forbidden.loaded
