"""The test bed's router (:class:`testbed.router.Router`) over local TLS replicas.

A namespace's next two Job creates, once :meth:`~testbed.router.Router.pair` names it,
are judged one by each replica (what the races count on: behind the Service both halves
of every race of a run could reach one replica); a paired create whose partner never
comes goes on alone; every other request of a pinned namespace reaches its replica, and
any other request the replicas in turn; the review's path, query and body reach the
replica unchanged, and its answer comes back unchanged, over TLS both ways.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from testbed.certs import MountedCertificate
from testbed.router import Router
from tests.builders import review as admission_review


class _Replica:
    """An HTTPS server with a certificate of its own that answers who it is and what it got."""

    def __init__(self, index: int, directory: Path) -> None:
        self.certificate = MountedCertificate(directory / f"replica-{index}")

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                answer = json.dumps({"replica": index, "path": self.path, "got": body.decode()})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.certificate.cert_file, self.certificate.key_file)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def ready(self) -> bool:
        return True


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    replicas = [_Replica(i, tmp_path) for i in range(2)]
    cas = b"".join(r.certificate.ca_pem for r in replicas)
    started = Router(replicas, cas, hold_seconds=1.0).start()
    yield started
    started.stop()
    for replica in replicas:
        replica.server.shutdown()


def review(namespace: str, kind: str = "Job", operation: str = "CREATE") -> bytes:
    request = {"namespace": namespace, "kind": {"kind": kind}, "operation": operation}
    return json.dumps(admission_review(request)).encode()


def send(router: Router, body: bytes, path: str = "/validate-jobs?timeout=5s") -> Any:
    ctx = ssl.create_default_context(cadata=router.ca_pem.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", router.port, context=ctx, timeout=30)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        assert answer.status == 200
        return json.loads(answer.read())
    finally:
        conn.close()


def test_a_pair_of_job_creates_is_judged_one_by_each_replica(router: Router) -> None:
    for _ in range(5):
        router.pair("blast")
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: send(router, review("blast")), range(2)))
        assert sorted(a["replica"] for a in answers) == [0, 1]


def test_a_paired_create_whose_partner_never_comes_goes_on_alone(router: Router) -> None:
    router.pair("blast")
    assert send(router, review("blast"))["replica"] in (0, 1)
    # The pair is over: the next create is not held for a partner either.
    assert send(router, review("blast"))["replica"] in (0, 1)


def test_a_pinned_namespace_reaches_its_replica_but_for_a_pair(router: Router) -> None:
    router.pin("blast", 1)
    assert [send(router, review("blast"))["replica"] for _ in range(4)] == [1] * 4
    router.pair("blast")
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: send(router, review("blast")), range(2)))
    assert sorted(a["replica"] for a in answers) == [0, 1]
    assert send(router, review("blast", "Lease"))["replica"] == 1
    router.pin("blast", None)
    assert {send(router, review("blast"))["replica"] for _ in range(2)} == {0, 1}


def test_other_requests_take_turns_and_pass_unchanged(router: Router) -> None:
    router.pair("blast")  # pairs Job creates of blast only
    bodies = [review("other"), review("blast", "Lease"), review("blast", operation="UPDATE")]
    judged = []
    for i in range(6):
        body = bodies[i % 3]
        answer = send(router, body, f"/validate-leases?timeout=5s&n={i}")
        assert answer["path"] == f"/validate-leases?timeout=5s&n={i}"
        assert answer["got"] == body.decode()
        judged.append(answer["replica"])
    assert judged in ([0, 1] * 3, [1, 0] * 3)


async def test_a_partner_that_comes_as_the_hold_ends_still_makes_a_pair(tmp_path: Path) -> None:
    # The first create's hold ends (0 s here) while the second is arriving: whichever
    # way that goes, the two are judged by different replicas, even in a pinned namespace.
    replicas = [_Replica(i, tmp_path) for i in range(2)]
    cas = b"".join(r.certificate.ca_pem for r in replicas)
    router = Router(replicas, cas, hold_seconds=0.0)
    router.pin("blast", 1)
    request = {"namespace": "blast", "kind": {"kind": "Job"}, "operation": "CREATE"}
    try:
        for _ in range(20):
            router.pair("blast")
            turns = await asyncio.gather(*(router._replica({"request": request}) for _ in range(2)))
            assert sorted(turns) == [0, 1]
    finally:
        for replica in replicas:
            replica.server.shutdown()
