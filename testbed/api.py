"""A small synchronous client for the real API server, for tests and tools.

Raw JSON over HTTPS (urllib3, which the official ``kubernetes`` client brings, and
that client's reader of watch lines):
the objects stay the dicts the API server sent, resource paths come from the
server's own discovery, and errors carry the server's ``Status``.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes.watch.watch import iter_resp_lines

JsonObj = dict[str, Any]


def _decoded(data: bytes) -> Any:
    """A JSON answer decoded (its text when it is not JSON)."""
    text = data.decode("utf-8", "replace")
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


class ApiError(Exception):
    """The API server answered with an error ``Status``."""

    def __init__(self, status: int, body: Mapping[str, Any] | str, method: str, path: str) -> None:
        self.status = status
        self.body: Mapping[str, Any] = body if isinstance(body, Mapping) else {"message": body}
        self.reason = str(self.body.get("reason") or "")
        self.message = str(self.body.get("message") or body)
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")


@dataclass(frozen=True)
class Resource:
    """Where a resource lives: ``/api/v1`` or ``/apis/<group>/<version>``, plural name."""

    base: str
    plural: str
    kind: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        ns = f"namespaces/{quote(namespace, safe='')}" if self.namespaced and namespace else ""
        parts = (self.base, ns, self.plural, quote(name or "", safe=""), sub)
        return "/".join(part for part in parts if part)


class Api:
    """One identity's view of the API server."""

    def __init__(self, server: str, ca_file: str, token: str, *, timeout: float = 60.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self._read_timeout = timeout
        ctx = ssl.create_default_context(cafile=ca_file)
        self._http = urllib3.PoolManager(maxsize=8, ssl_context=ctx, retries=False)
        self._resources: dict[str, Resource] | None = None
        self._lock = threading.Lock()

    # -- raw ----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One call; the decoded JSON answer, or :class:`ApiError`."""
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        return _decoded(self._send(method, path, query, data, content_type).data)

    def stream(self, path: str, query: Mapping[str, Any]) -> Iterator[JsonObj]:
        """Watch events (decoded lines) until the server ends the stream."""
        resp = self._send("GET", path, {**query, "watch": "1"}, streaming=True)
        try:
            for line in iter_resp_lines(resp):  # the official client's watch reader
                if line.strip():
                    yield json.loads(line)
        finally:
            resp.release_conn()

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: bytes | None = None,
        content_type: str = "application/json",
        *,
        streaming: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """The answer of one call (its body unread when ``streaming``); an error answer
        raises :class:`ApiError` with the server's ``Status``."""
        url = self.server + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        resp = self._http.request(
            method,
            url,
            body=body,
            headers=headers,
            preload_content=not streaming,
            timeout=urllib3.Timeout(connect=10, read=None if streaming else self._read_timeout),
        )
        if resp.status >= 400:  # read whole, which returns the connection to the pool
            raise ApiError(resp.status, _decoded(resp.data), method, path)
        return resp

    # -- discovery ----------------------------------------------------------------------

    def resource(self, name: str) -> Resource:
        """A resource by plural (``jobs``), lower-case kind (``job``) or ``plural.group``."""
        with self._lock:
            if self._resources is None:
                self._resources = self._discover()
        try:
            return self._resources[name.lower()]
        except KeyError:
            raise KeyError(f"the API server serves no resource {name!r}") from None

    def _discover(self) -> dict[str, Resource]:
        found: dict[str, Resource] = {}
        groups = self.request("GET", "/apis").get("groups", [])
        for version in ["v1"] + [g["preferredVersion"]["groupVersion"] for g in groups]:
            base = "/apis/" + version if "/" in version else "/api/" + version
            for res in self.request("GET", base).get("resources", []):
                if "/" in res["name"]:
                    continue
                entry = Resource(base, res["name"], res["kind"], bool(res["namespaced"]))
                kind = res["kind"].lower()
                group = version.rpartition("/")[0]
                for key in (res["name"], kind, f"{res['name']}.{group}", f"{kind}@{version}"):
                    found.setdefault(key, entry)
        return found

    def _for(self, obj: Mapping[str, Any]) -> Resource:
        kind = str(obj.get("kind") or "").lower()
        api_version = str(obj.get("apiVersion") or "v1")
        try:
            return self.resource(f"{kind}@{api_version}")
        except KeyError:
            return self.resource(kind)

    # -- objects ------------------------------------------------------------------------

    def create(self, obj: Mapping[str, Any], namespace: str | None = None, **query: Any) -> JsonObj:
        res = self._for(obj)
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        return dict(self.request("POST", res.path(ns), obj, query=query or None))

    def create_once(self, obj: Mapping[str, Any]) -> None:
        """:meth:`create`, unless an object of its name is there already (left as it is)."""
        try:
            self.create(obj)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def get(self, resource: str, namespace: str | None, name: str) -> JsonObj:
        return dict(self.request("GET", self.resource(resource).path(namespace, name)))

    def find(self, resource: str, namespace: str | None, name: str) -> JsonObj | None:
        """:meth:`get`, or ``None`` when there is no such object."""
        try:
            return self.get(resource, namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[JsonObj]:
        body = self.request(
            "GET",
            self.resource(resource).path(namespace),
            query={"labelSelector": label_selector, "fieldSelector": field_selector},
        )
        return list(body.get("items") or [])

    def update(self, obj: Mapping[str, Any], sub: str = "") -> JsonObj:
        """PUT ``obj`` (``sub="status"``: its status)."""
        meta = obj.get("metadata") or {}
        path = self._for(obj).path(meta.get("namespace"), meta["name"], sub)
        return dict(self.request("PUT", path, obj))

    def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        kind: str = "merge",
        sub: str = "",
    ) -> JsonObj:
        """``kind``: merge or json."""
        content_type = f"application/{kind}-patch+json"
        path = self.resource(resource).path(namespace, name, sub)
        return dict(self.request("PATCH", path, patch, content_type=content_type))

    def delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        *,
        grace_seconds: int | None = None,
    ) -> None:
        """Delete in the background; gone already is fine."""
        # A null gracePeriodSeconds is an unset one: the object's own grace period.
        body = {"propagationPolicy": "Background", "gracePeriodSeconds": grace_seconds}
        try:
            self.request("DELETE", self.resource(resource).path(namespace, name), body)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def apply(self, obj: Mapping[str, Any]) -> JsonObj:
        """Create, or replace what is there (keeps its resourceVersion)."""
        meta = obj.get("metadata") or {}
        res = self._for(obj)
        existing = self.find(res.plural, meta.get("namespace"), meta["name"])
        if existing is None:
            return self.create(obj)
        rv = existing["metadata"]["resourceVersion"]
        return self.update({**obj, "metadata": {**meta, "resourceVersion": rv}})
