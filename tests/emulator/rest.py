"""A raw HTTPS client for the emulator's tests (urllib + bearer token, no Kubernetes client)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from tests.kube_emulator import Emulator


@dataclass
class Reply:
    status: int
    headers: Any
    body: Any


def call(emu: Emulator, method: str, path: str, body: Any = None, *, user: str = "admin",
         content_type: str = "application/json", token: str | None = None) -> Reply:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(emu.url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token if token is not None else emu.token(user)}")
    if data is not None:
        req.add_header("Content-Type", content_type)
    ctx = ssl.create_default_context(cafile=emu.ca_file)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            raw = resp.read()
            return Reply(resp.status, resp.headers, json.loads(raw) if raw else None)
    except urllib.error.HTTPError as err:
        raw = err.read()
        return Reply(err.code, err.headers, json.loads(raw) if raw else None)


def watch_lines(emu: Emulator, path: str, *, user: str = "admin", limit: int | None = None
                ) -> list[dict[str, Any]]:
    """Read a watch stream until it ends (timeoutSeconds) or `limit` events arrived."""
    req = urllib.request.Request(emu.url + path)
    req.add_header("Authorization", f"Bearer {emu.token(user)}")
    ctx = ssl.create_default_context(cafile=emu.ca_file)
    events: list[dict[str, Any]] = []
    with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
        for line in resp:
            events.append(json.loads(line))
            if limit is not None and len(events) >= limit:
                break
    return events
