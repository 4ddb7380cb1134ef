"""A stand-in API server with canned answers, for CLI tests that need a few
GETs and LISTs and nothing else (no admission, no watches, no writes).

Plain HTTP on 127.0.0.1, port 0, in a daemon thread; the answers are the
apiserver's own shapes (a ``Status`` for errors, ``{"items": [...]}`` for lists).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def not_found(resource: str, name: str) -> tuple[int, dict[str, Any]]:
    """The apiserver's 404 Status for ``resource``/``name``, byte-for-byte in shape."""
    return 404, {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{resource} "{name}" not found',
        "reason": "NotFound",
        "details": {"name": name, "kind": resource},
        "code": 404,
    }


def namespace(name: str) -> dict[str, Any]:
    """A Namespace as the apiserver returns it (only what a reader looks at)."""
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "status": {"phase": "Active"},
    }


def job_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A JobList."""
    return {
        "kind": "JobList",
        "apiVersion": "batch/v1",
        "metadata": {"resourceVersion": "7"},
        "items": items,
    }


class CannedApi:
    """Answers GET ``path`` (query ignored) from ``routes``; 404 Status otherwise."""

    def __init__(self, routes: dict[str, tuple[int, dict[str, Any]]]) -> None:
        self.routes = routes
        self.requests: list[str] = []

    def answer(self, path: str) -> tuple[int, dict[str, Any]]:
        self.requests.append(path)
        if path in self.routes:
            return self.routes[path]
        return not_found("unknown", path.rsplit("/", 1)[-1])


def _handler(api: CannedApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, body = api.answer(urlsplit(self.path).path)
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serving(api: CannedApi, tmp: Path) -> Iterator[Path]:
    """Serve ``api``; yields the path of a kubeconfig that points at it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://{host!s}:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
