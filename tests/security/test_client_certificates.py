"""The admission port over real TLS: the API server's client certificate is what
tells it from any other caller (ELB_GATE_CLIENT_AUTH verify and require), and a
caller without it costs a bounded share and learns no reasons.

The server is the product's own: ``admission_endpoint`` behind the
:class:`~webhook.tls.ServingCertificate` context, on 127.0.0.1, with the handler
replaced by one that answers as the Lease guard does (and can be held in flight).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import trustme
from aiohttp import web
from prometheus_client import CollectorRegistry

from elbgate.settings import Settings
from tests.builders import admission, user
from tests.builders import review as admission_review
from webhook.callers import CallerPolicy
from webhook.decision import Answer, refuse
from webhook.endpoint import admission_endpoint
from webhook.metrics import LEASE_GUARD, WebhookMetrics
from webhook.review import AdmissionRequest, denied
from webhook.tls import CertificateInvalid, ServingCertificate

API_SERVER = "kube-apiserver-webhook-client"
NODE = "system:node:aks-blastpool-0"
"""Another client whose certificate the same CA signs (a kubelet's, on many clusters)."""
MAX = 64 * 1024
UNVERIFIED_MAX = 4096
HELD = "Lease t/elb-blast-submit-t is held by dashboard-1 (user dashboard-lease, pod t/dash-0/7c1e)"


@dataclass
class Pki:
    """A serving CA, and a client CA that signs the API server's certificate and a node's."""

    tmp: Path
    serving: trustme.CA = field(default_factory=trustme.CA)
    clients: trustme.CA = field(default_factory=trustme.CA)
    stranger: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        leaf = self.serving.issue_cert("127.0.0.1")
        leaf.private_key_pem.write_to_path(str(self.tmp / "tls.key"))
        leaf.cert_chain_pems[0].write_to_path(str(self.tmp / "tls.crt"))
        self.clients.cert_pem.write_to_path(str(self.client_ca))

    @property
    def client_ca(self) -> Path:
        return self.tmp / "client-ca.crt"

    def client(
        self, cn: str | None = None, ca: trustme.CA | None = None, dns: str = ""
    ) -> ssl.SSLContext:
        """A client context trusting the server, presenting a certificate for ``cn``
        (DNS name ``dns``, default ``cn``) if given."""
        ctx = ssl.create_default_context()
        self.serving.configure_trust(ctx)
        if cn is not None:
            (ca or self.clients).issue_cert(dns or cn, common_name=cn).configure_cert(ctx)
        return ctx


class Held:
    """A handler that answers like the Lease guard, and holds requests named ``hold``."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = 0
        self._entered = asyncio.Condition()

    async def __call__(self, request: AdmissionRequest) -> Answer:
        if request.name == "hold":
            async with self._entered:
                self.holding += 1
                self._entered.notify_all()
            await self.release.wait()
        return Answer(denied(409, "Conflict", HELD), "denied", refuse(409, "takeover_live", HELD))

    async def wait_holding(self, count: int) -> None:
        """Until ``count`` requests are inside the handler."""
        async with self._entered:
            await self._entered.wait_for(lambda: self.holding >= count)


@dataclass
class Server:
    url: str
    handler: Held
    recorded: list[tuple[str, str]]
    in_flight: list[int]


def review(name: str = "elb-blast-submit-t", pad: int = 0) -> bytes:
    obj = {"metadata": {"name": name, "annotations": {"pad": "x" * pad}}}
    request = admission("UPDATE", obj, who=user("mallory"), resource="leases", namespace="t")
    return orjson.dumps(admission_review(request))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
async def serve(pki: Pki) -> AsyncIterator[Callable[[str], Any]]:
    runners: list[web.AppRunner] = []

    async def start(mode: str) -> Server:
        env = {"ELB_GATE_CLIENT_AUTH": mode}
        if mode != "off":
            env |= {
                "ELB_GATE_CLIENT_CA_FILE": str(pki.client_ca),
                "ELB_GATE_CLIENT_NAMES": API_SERVER,
            }
        env |= {"ELB_GATE_UNVERIFIED_MAX_REQUEST_BYTES": str(UNVERIFIED_MAX)}
        settings = Settings.from_env(env)
        recorded: list[tuple[str, str]] = []
        in_flight: list[int] = []
        policy = CallerPolicy.from_settings(
            settings.webhook,
            lambda kind, outcome: recorded.append((kind, outcome)),
            in_flight.append,
        )
        certificate = ServingCertificate(
            str(pki.tmp / "tls.crt"),
            str(pki.tmp / "tls.key"),
            client_auth=settings.webhook.client_auth,
            client_ca_file=settings.webhook.client_ca_file,
        )
        assert certificate.reload_if_changed()
        handler = Held()
        app = web.Application(client_max_size=MAX + 1)
        metrics = WebhookMetrics(CollectorRegistry())
        endpoint = admission_endpoint(LEASE_GUARD, handler, MAX, metrics, policy)
        app.router.add_post("/validate/leases", endpoint)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificate.context)
        await site.start()
        port = runner.addresses[0][1]
        return Server(f"https://127.0.0.1:{port}/validate/leases", handler, recorded, in_flight)

    yield start
    for runner in runners:
        await runner.cleanup()


async def post(server: Server, ctx: ssl.SSLContext, body: bytes) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.url, data=body, ssl=ctx, headers={"Content-Type": "application/json"}
        ) as resp,
    ):
        return resp.status, orjson.loads(await resp.read())


def message(answer: dict[str, Any]) -> str:
    if answer.get("kind") == "Status":
        return str(answer["message"])
    return str(answer["response"]["status"]["message"])


# -- who is told what -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["verify", "require"])
async def test_the_api_servers_certificate_gets_the_whole_answer(
    serve: Any, pki: Pki, mode: str
) -> None:
    server = await serve(mode)
    status, answer = await post(server, pki.client(API_SERVER), review(pad=UNVERIFIED_MAX))
    assert status == 200
    assert message(answer) == HELD
    assert server.recorded == [("api-server", "answered")]


async def test_with_verify_a_caller_without_a_certificate_is_told_only_the_decision(
    serve: Any, pki: Pki
) -> None:
    server = await serve("verify")
    status, answer = await post(server, pki.client(), review())
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 409
    assert message(answer).startswith(
        "refused (409 Conflict); elb-gate gives its reasons only to the API server"
    )
    assert "dashboard" not in message(answer)
    assert server.recorded == [("unverified", "answered")]


async def test_with_verify_another_client_of_the_same_ca_is_unverified(
    serve: Any, pki: Pki
) -> None:
    server = await serve("verify")
    status, answer = await post(server, pki.client(NODE, dns="aks-blastpool-0"), review())
    assert status == 200 and "dashboard" not in message(answer)
    assert server.recorded == [("unverified", "answered")]


async def test_with_verify_an_unverified_body_over_its_smaller_cap_is_a_413(
    serve: Any, pki: Pki
) -> None:
    server = await serve("verify")
    status, answer = await post(server, pki.client(), review(pad=UNVERIFIED_MAX))
    assert status == 413
    assert message(answer) == (
        f"AdmissionReview larger than {UNVERIFIED_MAX} bytes (ELB_GATE_UNVERIFIED_MAX_REQUEST_BYTES)"
    )
    assert server.recorded == [("unverified", "too_large")]


async def test_with_require_a_caller_without_a_certificate_fails_the_handshake(
    serve: Any, pki: Pki
) -> None:
    server = await serve("require")
    with pytest.raises(aiohttp.ClientConnectionError):
        await post(server, pki.client(), review())
    assert server.recorded == [] and server.handler.holding == 0


async def test_with_require_another_client_of_the_same_ca_gets_a_403(serve: Any, pki: Pki) -> None:
    server = await serve("require")
    status, answer = await post(server, pki.client(NODE, dns="aks-blastpool-0"), review())
    assert status == 403
    assert message(answer) == (
        f"client certificate ({NODE}, aks-blastpool-0) is not one of ELB_GATE_CLIENT_NAMES "
        f"({API_SERVER}); only the API server is answered here"
    )
    assert server.recorded == [("unverified", "refused")]


@pytest.mark.parametrize("mode", ["verify", "require"])
async def test_a_certificate_from_another_ca_fails_the_handshake(
    serve: Any, pki: Pki, mode: str
) -> None:
    server = await serve(mode)
    with pytest.raises(aiohttp.ClientConnectionError):
        await post(server, pki.client(API_SERVER, ca=pki.stranger), review())
    assert server.recorded == []


async def test_with_off_every_caller_gets_the_whole_answer_and_nothing_is_counted(
    serve: Any, pki: Pki
) -> None:
    server = await serve("off")
    for ctx in (pki.client(), pki.client(API_SERVER)):
        status, answer = await post(server, ctx, review(pad=UNVERIFIED_MAX))
        assert (status, message(answer)) == (200, HELD)
    assert server.recorded == []


# -- what an unverified caller may cost ----------------------------------------------------


async def test_an_unverified_source_gets_two_requests_in_flight_while_the_api_server_gets_any(
    serve: Any, pki: Pki
) -> None:
    server = await serve("verify")
    held = [asyncio.create_task(post(server, pki.client(), review("hold"))) for _ in range(2)]
    await server.handler.wait_holding(2)
    status, answer = await post(server, pki.client(), review())
    assert status == 429
    assert message(answer) == (
        "2 requests from 127.0.0.1 are in flight (ELB_GATE_UNVERIFIED_IN_FLIGHT_PER_SOURCE); "
        "callers not verified as the API server get no more"
    )
    api = [
        asyncio.create_task(post(server, pki.client(API_SERVER), review("hold"))) for _ in range(3)
    ]
    await server.handler.wait_holding(5)  # the API server's three are in too
    server.handler.release.set()
    assert [s for s, _ in await asyncio.gather(*held, *api)] == [200] * 5
    assert server.in_flight == [1, 2, 1, 0]
    assert sorted(server.recorded) == sorted(
        [("unverified", "limited")]
        + [("unverified", "answered")] * 2
        + [("api-server", "answered")] * 3
    )


def test_an_unreadable_client_ca_is_refused_naming_the_setting(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    with pytest.raises(
        CertificateInvalid, match=r"ELB_GATE_CLIENT_CA_FILE '.*ca\.crt' holds no usable CA"
    ):
        ServingCertificate("a", "b", client_auth="verify", client_ca_file=str(tmp_path / "ca.crt"))
