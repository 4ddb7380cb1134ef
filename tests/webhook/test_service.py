"""The test bed's Service (:class:`testbed.service.Service`) over local TCP replicas.

Each connection goes to the ready replica with the fewest connections open, in turn
among equals, so a connection dialled again after one closed lands where it leaves the
replicas even (plain round robin could put every open connection on one); a replica
whose readiness probe fails leaves the rotation until it passes again; with none ready
a connection is closed at once. And it stops cleanly with connections open: a
connection task that ended cancelled made Python 3.11's asyncio log "Exception in
callback ... CancelledError" with a traceback at every stop with an open connection,
noise that the demo's own check (no traceback on its stderr) then failed on."""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from testbed.service import Service
from testbed.waiting import wait_until


class _Replica:
    """A local TCP server: says its name on each connection, then echoes; its readiness
    probe answers what the test sets."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.probe_passes = True
        said = name.encode()

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.sendall(said)
                while data := self.request.recv(65536):
                    self.request.sendall(data)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def ready(self) -> bool:
        return self.probe_passes

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def replicas() -> Iterator[list[_Replica]]:
    made = [_Replica("a"), _Replica("b")]
    yield made
    for replica in made:
        replica.close()


def answers(service: Service, count: int) -> list[str]:
    """Which replica answered each of ``count`` new connections ("" when closed at once)."""
    out = []
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", service.port), timeout=30) as client:
            out.append(client.recv(1).decode())
        # Closed here; the Service counts it closed once its pipes have ended.
        wait_until(lambda: not any(service.open), 30, "the connection counted closed", 0.01)
    return out


def test_a_connection_dialled_again_goes_where_fewer_are_open(replicas: list[_Replica]) -> None:
    service = Service(replicas, probe_seconds=3600).start()
    held: list[socket.socket] = []
    try:
        for _ in range(2):  # the API server's pool: one connection on each replica
            held.append(socket.create_connection(("127.0.0.1", service.port), timeout=30))
        assert [c.recv(1) for c in held] == [b"a", b"b"]
        # The one on "b" idles out and is dialled again; round robin's next turn is "a".
        b_conn = held[1]
        b_conn.close()
        held.remove(b_conn)
        wait_until(lambda: service.open == [1, 0], 30, "b's connection counted closed", 0.01)
        held.append(socket.create_connection(("127.0.0.1", service.port), timeout=30))
        assert held[-1].recv(1) == b"b"
        assert service.open == [1, 1] and service.connections == [1, 2]
    finally:
        for c in held:
            c.close()
        service.stop()


def test_connections_go_in_turn_over_the_ready_replicas(replicas: list[_Replica]) -> None:
    a, b = replicas
    service = Service(replicas, probe_seconds=3600).start()  # probed here only, in step
    try:
        assert answers(service, 4) == ["a", "b", "a", "b"]
        assert service.connections == [2, 2]

        b.probe_passes = False  # its readiness probe fails: out of the rotation
        service.probe_now()
        assert answers(service, 3) == ["a"] * 3
        b.probe_passes = True
        service.probe_now()
        assert sorted(answers(service, 2)) == ["a", "b"]

        a.probe_passes = b.probe_passes = False
        service.probe_now()
        assert answers(service, 2) == ["", ""]  # nothing ready: closed at once
        assert service.connections == [6, 3]
    finally:
        service.stop()


def test_the_replicas_are_probed_on_their_own(replicas: list[_Replica]) -> None:
    service = Service(replicas, probe_seconds=0.05).start()
    try:
        replicas[1].probe_passes = False
        wait_until(lambda: service.ready == [True, False], 30, "b out of the rotation")
        replicas[1].probe_passes = True
        wait_until(service.all_ready, 30, "b back in the rotation")
    finally:
        service.stop()


def test_stopping_with_an_open_connection_logs_no_exception(
    replicas: list[_Replica], caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(replicas[:1]).start()
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        client = socket.create_connection(("127.0.0.1", service.port), timeout=30)
        try:
            assert client.recv(1) == b"a"
            client.sendall(b"ping")
            assert client.recv(4) == b"ping"  # forwarded both ways, and still open
            service.stop()
        finally:
            client.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert service.connections == [1]
