"""Async access to the Kubernetes API over raw JSON.

Hot paths (admission) must not build client model objects for whole lists, so
this speaks HTTP with aiohttp and parses with orjson; callers get plain dicts.
Every call has a deadline. Failures are typed: :class:`ApiError` carries the
apiserver's Status (code, reason, message); :class:`ApiUnavailable` means no
answer at all (timeout, refused, reset), or no valid token to send — callers fail
closed on both.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import orjson

from elbgate.kube.config import CredentialError, KubeConfig

Json = dict[str, Any]

PAGE_SIZE = 500
"""Objects per page of a LIST (client-go's pager default): a namespace holds tens of
thousands of finished Jobs, and an unpaged LIST of them is a gigabyte of JSON."""


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""``Accept`` of a metadata-only LIST: each item is its ``metadata`` alone (name, labels,
annotations, resourceVersion; no spec, no status), as client-go's metadata client asks."""
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""``Accept`` of a metadata-only WATCH: each event's object is a ``PartialObjectMetadata``."""


class ApiError(Exception):
    """The API server answered with an error Status."""

    def __init__(self, code: int, reason: str, message: str, body: Json | None = None) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.body = body or {}
        super().__init__(f"{code} {reason}: {message}")

    @property
    def not_found(self) -> bool:
        return self.code == 404

    @property
    def from_kubernetes(self) -> bool:
        """The answer was a Kubernetes ``Status`` object, as every error of an API
        server is; a 404 without one came from something else at that address (a
        web server, a proxy in front of nothing), not from a missing object."""
        return self.body.get("kind") == "Status"

    @property
    def conflict(self) -> bool:
        """409: a stale resourceVersion or an existing name (reason says which)."""
        return self.code == 409

    @property
    def gone(self) -> bool:
        return self.code == 410


class ApiUnavailable(Exception):
    """No answer from the API server within the deadline, the connection failed, or
    there is no valid token to send (:class:`NoCredentials`)."""


class NoCredentials(ApiUnavailable):
    """Nothing was sent: obtaining a token failed and the last one has expired. The
    message says why (the exec plugin's own error, the unreadable token file)."""


def resource_path(
    group_version: str,
    resource: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/api/v1/namespaces/ns/pods/x`` or ``/apis/batch/v1/namespaces/ns/jobs``."""
    root = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    parts = [root]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(resource)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


def is_collection(url_path: str) -> bool:
    """Whether ``url_path`` names a collection (``/api/v1/nodes``,
    ``/apis/batch/v1/namespaces/ns/jobs``) rather than one object or subresource."""
    parts = [p for p in url_path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return False
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return len(rest) == 1


LEASES = ("coordination.k8s.io/v1", "leases")
JOBS = ("batch/v1", "jobs")
PODS = ("v1", "pods")
CONFIGMAPS = ("v1", "configmaps")
EVENTS = ("v1", "events")
NODES = ("v1", "nodes")
SECRETS = ("v1", "secrets")
ENDPOINTSLICES = ("discovery.k8s.io/v1", "endpointslices")
CLUSTERROLES = ("rbac.authorization.k8s.io/v1", "clusterroles")
VALIDATING_WEBHOOK_CONFIGURATIONS = (
    "admissionregistration.k8s.io/v1",
    "validatingwebhookconfigurations",
)
MUTATING_WEBHOOK_CONFIGURATIONS = (
    "admissionregistration.k8s.io/v1",
    "mutatingwebhookconfigurations",
)


def path(
    kind: tuple[str, str],
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """Path for one of the resource pairs above."""
    return resource_path(kind[0], kind[1], namespace, name, subresource)


class KubeApi:
    """A small async API client. Use as ``async with KubeApi(config) as api``."""

    def __init__(
        self, config: KubeConfig, timeout: float = 5.0, user_agent: str = "elb-gate"
    ) -> None:
        self.config = config
        self.timeout = timeout
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeApi:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self.config.ssl_context(), limit=64)
            self._session = aiohttp.ClientSession(
                connector=connector, json_serialize=lambda o: orjson.dumps(o).decode()
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(
        self, what: str, content_type: str | None = None, accept: str = "application/json"
    ) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": self._user_agent}
        try:
            token = self.config.token.current()
        except CredentialError as exc:
            # As client-go: the call fails with why there is no token to send, rather
            # than going out without one (or with one already expired) and being refused.
            raise NoCredentials(f"{what}: {exc}") from None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        url_path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        deadline: float | None = None,
        accept: str = "application/json",
    ) -> Json:
        """One API call with a deadline; returns the decoded JSON body. A GET of a
        collection must be paged (``limit``) or a watch: see :meth:`list_objects`."""
        if (
            method == "GET"
            and is_collection(url_path)
            and not (query and ("limit" in query or "watch" in query))
        ):
            raise ValueError(f"unpaged LIST of {url_path}: use list_objects, which pages")
        deadline = self.timeout if deadline is None else deadline
        # Before the deadline starts: obtaining the token may run an exec plugin
        # (kubelogin), whose seconds are not the API server's.
        headers = self._headers(
            f"{method} {url_path}", content_type if body is not None else None, accept
        )
        try:
            async with asyncio.timeout(deadline):
                return await self._exchange(method, url_path, query, body, headers)
        except TimeoutError:
            raise ApiUnavailable(f"{method} {url_path}: no answer within {deadline:g}s") from None

    async def _exchange(
        self,
        method: str,
        url_path: str,
        query: Mapping[str, str] | None,
        body: Any,
        headers: Mapping[str, str],
    ) -> Json:
        """One request and its decoded answer, with no deadline of its own: the caller's
        ``asyncio.timeout`` bounds it (one call, or every page of one LIST)."""
        if self._session is None:
            await self.open()
        assert self._session is not None
        url = self.config.host + url_path + (f"?{urlencode(query)}" if query else "")
        data = orjson.dumps(body) if body is not None else None
        try:
            async with self._session.request(method, url, data=data, headers=headers) as resp:
                raw = await resp.read()
                status = resp.status
        except aiohttp.ClientError as exc:
            raise ApiUnavailable(f"{method} {url_path}: {exc.__class__.__name__}: {exc}") from None
        return _decode(status, raw, method, url_path)

    async def get(self, url_path: str, **kw: Any) -> Json:
        return await self.request("GET", url_path, **kw)

    async def get_or_none(self, url_path: str, **kw: Any) -> Json | None:
        """GET that maps 404 to ``None`` (absence is a normal outcome)."""
        try:
            return await self.get(url_path, **kw)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def list_objects(
        self,
        url_path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        deadline: float | None = None,
        page_size: int = PAGE_SIZE,
        accept: str = "application/json",
    ) -> Json:
        """A consistent LIST, read in pages of ``page_size`` (``limit`` + ``continue``,
        as client-go's pager does) so that no answer holds a whole namespace's history;
        returns one body: the first page's ``metadata`` and every page's ``items``.
        ``deadline`` bounds the whole LIST, not each page; ``accept`` :data:`METADATA_LIST`
        reads each object's metadata alone."""
        query = {"limit": str(page_size)}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        budget = self.timeout if deadline is None else deadline
        first: Json | None = None
        items: list[Any] = []
        # One deadline for the whole LIST, and the error names it as configured: a
        # page's share of it (what is left after the pages before) is no setting
        # anyone could look up. The token is taken once, before the deadline starts:
        # it is obtained again well before it expires, so every page may carry it.
        headers = self._headers(f"GET {url_path}", None, accept)
        try:
            async with asyncio.timeout(budget):
                while True:
                    body = await self._exchange("GET", url_path, query, None, headers)
                    page = body.get("items")
                    if isinstance(page, list):
                        items.extend(page)
                    meta = body.get("metadata") or {}
                    if first is None:
                        first = body
                    cont = str(meta.get("continue") or "")
                    if not cont:
                        break
                    query = {**query, "continue": cont}
        except TimeoutError:
            if first is None:
                raise ApiUnavailable(f"GET {url_path}: no answer within {budget:g}s") from None
            raise ApiUnavailable(
                f"GET {url_path}: not read whole within {budget:g}s ({len(items)} objects read)"
            ) from None
        out = {k: v for k, v in first.items() if k != "items"}
        out["metadata"] = {
            k: v for k, v in (first.get("metadata") or {}).items() if k != "continue"
        }
        out["items"] = items
        return out

    async def create(self, url_path: str, body: Json, **kw: Any) -> Json:
        return await self.request("POST", url_path, body=body, **kw)

    async def replace(self, url_path: str, body: Json, **kw: Any) -> Json:
        """PUT; a ``metadata.resourceVersion`` in ``body`` makes it a CAS (409 if stale)."""
        return await self.request("PUT", url_path, body=body, **kw)

    async def merge_patch(self, url_path: str, patch: Json, **kw: Any) -> Json:
        return await self.request(
            "PATCH", url_path, body=patch, content_type="application/merge-patch+json", **kw
        )

    async def delete(
        self,
        url_path: str,
        *,
        resource_version: str | None = None,
        uid: str | None = None,
        propagation: str = "Background",
        **kw: Any,
    ) -> Json:
        """DELETE with optional preconditions (409 when the object changed)."""
        opts: Json = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        pre = {k: v for k, v in (("resourceVersion", resource_version), ("uid", uid)) if v}
        if pre:
            opts["preconditions"] = pre
        return await self.request("DELETE", url_path, body=opts, **kw)

    async def watch(
        self,
        url_path: str,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[Json]:
        """Yield watch events (``{"type", "object"}``) until the server closes the
        stream. An ERROR event with code 410 raises ``ApiError`` (caller relists)."""
        if self._session is None:
            await self.open()
        assert self._session is not None
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
        }
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        url = f"{self.config.host}{url_path}?{urlencode(query)}"
        client_timeout = aiohttp.ClientTimeout(
            total=None, connect=self.timeout, sock_read=timeout_seconds + 30
        )
        headers = self._headers(f"WATCH {url_path}")
        try:
            async with self._session.get(url, headers=headers, timeout=client_timeout) as resp:
                if resp.status != 200:
                    _decode(resp.status, await resp.read(), "WATCH", url_path)
                # Lines are split here, not by aiohttp's readline, which refuses
                # lines over its buffer limit: one large Job (objects reach 1.5 MB)
                # would otherwise break every watch of its namespace.
                pending = b""
                async for chunk in resp.content.iter_any():
                    pending += chunk
                    if b"\n" not in chunk:
                        continue  # mid-object: do not rescan a growing buffer
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield _watch_event(line)
                if pending.strip():
                    yield _watch_event(pending)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiUnavailable(f"WATCH {url_path}: {exc.__class__.__name__}: {exc}") from None


def _watch_event(line: bytes) -> Json:
    """One watch line; an ERROR event (e.g. 410 Gone) raises :class:`ApiError`."""
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise ApiUnavailable("WATCH: a line of the stream is not JSON") from None
    if not isinstance(event, dict):
        raise ApiUnavailable("WATCH: an event is not a JSON object")
    if event.get("type") == "ERROR":
        st = event.get("object") or {}
        raise ApiError(
            int(st.get("code") or 500),
            str(st.get("reason") or ""),
            str(st.get("message") or "watch error"),
            st,
        )
    return event


def _decode(status: int, raw: bytes, method: str, url_path: str) -> Json:
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        body = {}
    if 200 <= status < 300:
        if not isinstance(body, dict):
            raise ApiUnavailable(f"{method} {url_path}: answer is not a JSON object")
        return body
    if isinstance(body, dict) and body.get("kind") == "Status":
        raise ApiError(
            int(body.get("code") or status),
            str(body.get("reason") or ""),
            str(body.get("message") or ""),
            body,
        )
    text = raw[:200].decode("utf-8", "replace")
    raise ApiError(status, "", f"{method} {url_path}: HTTP {status}: {text}")
