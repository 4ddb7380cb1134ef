"""The test Service's forwarder stops cleanly with connections still open.

A connection task that ended cancelled made Python 3.11's asyncio log "Exception in
callback ... CancelledError" with a traceback at every stop with an open connection:
noise that the demo's own check (no traceback on its stderr) then failed on."""

from __future__ import annotations

import logging
import socket
import socketserver
import threading

import pytest

from testbed.webhook_service import ServiceProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


def test_stopping_with_an_open_connection_logs_no_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    echo.daemon_threads = True
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    try:
        proxy = ServiceProxy([echo.server_address[1]]).start()
        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            client = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
            try:
                client.sendall(b"ping")
                assert client.recv(4) == b"ping"  # forwarded both ways, and still open
                proxy.stop()
            finally:
                client.close()
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [], [r.getMessage() for r in errors]
        assert proxy.connections == {echo.server_address[1]: 1}
    finally:
        echo.shutdown()
        echo.server_close()
