"""The HTTP layer: authentication, fault injection, routing, and the REST verbs."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from aiohttp import web

from . import discovery, errors, protobuf
from .admission import AdmissionChain, Attributes
from .defaults import apply_defaults
from .errors import ApiError
from .faults import Faults, RequestInfo
from .patch import APPLY_PATCH, PATCH_TYPES, apply_patch
from .resources import Obj, ResourceType, lookup
from .selectors import LabelMatcher, parse_field_selector, parse_label_selector
from .store import Event, Store, selected
from .users import User

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PATHS = {"/healthz", "/livez", "/readyz"}
BODY_TYPES = ["application/json", "application/yaml"]
CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


@dataclass
class ServerState:
    """Everything the handlers share."""

    store: Store
    users: dict[str, User]  # by token
    admission: AdmissionChain
    faults: Faults
    address: str = "127.0.0.1:0"
    bookmark_interval: float = 1.0
    watches: set[asyncio.Queue[Event | None]] = field(default_factory=set)


STATE = web.AppKey("state", ServerState)


@dataclass
class Warnings:
    """The warnings collected while serving one request (sent as `Warning` headers)."""

    texts: list[str] = field(default_factory=list)


WARNINGS = web.RequestKey("warnings", Warnings)
USER = web.RequestKey("user", User)


@dataclass(frozen=True)
class Target:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str
    watch_path: bool


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=_dumps(data), status=status, content_type="application/json")


def _warning_header(text: str) -> str:
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_target(path: str) -> Target | None:
    """Resource paths: /api/v1/..., /apis/G/V/[watch/][namespaces/NS/]PLURAL[/NAME[/SUB]]."""
    segs = [s for s in path.split("/") if s]
    if segs[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis":
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        return None
    if not rest:
        return None
    watch_path = rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        inner = lookup(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    rt = lookup(group, version, rest[0]) if rest else None
    if rt is None or len(rest) > 3:
        raise errors.path_not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if sub and not (sub == "status" and rt.status_subresource):
        raise errors.path_not_found()
    if rt.namespaced and name is not None and namespace is None:
        raise errors.path_not_found()
    return Target(rt, namespace, name, sub, watch_path)


# -- middlewares ---------------------------------------------------------------


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    request[WARNINGS] = Warnings()
    try:
        response = await handler(request)
    except ApiError as err:
        response = _json(err.status(), err.code)
        for key, value in err.headers.items():
            response.headers[key] = value
    except (web.HTTPException, asyncio.CancelledError, ConnectionError):
        raise
    except Exception as exc:  # an emulator bug still answers like the apiserver would
        log.exception("emulator error on %s %s", request.method, request.path)
        response = _json(errors.internal(repr(exc)).status(), 500)
    if not response.prepared:
        for text in dict.fromkeys(request[WARNINGS].texts):
            response.headers.add("Warning", _warning_header(text))
    return response


@web.middleware
async def _inject_faults(request: web.Request, handler: Handler) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        target = parse_target(request.path)
    except ApiError:
        target = None
    info = RequestInfo(
        request.method,
        target.rt.plural if target else None,
        target.namespace if target else None,
        target.name if target else None,
        bool(target and (target.watch_path or _flag(request, "watch"))),
    )
    fault = state.faults.take(info)
    if fault is None:
        return await handler(request)
    if fault.delay:
        await asyncio.sleep(fault.delay)
    if fault.drop:
        if request.transport is not None:
            request.transport.abort()  # a reset, not a response
        return web.Response(status=500)
    if fault.status:
        raise errors.by_code(fault.status)
    return await handler(request)


@web.middleware
async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in OPEN_PATHS:
        return await handler(request)
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    user = request.app[STATE].users.get(token.strip()) if scheme.lower() == "bearer" else None
    if user is None:
        raise errors.unauthorized()
    request[USER] = user
    return await handler(request)


def create_app(state: ServerState) -> web.Application:
    """The emulated apiserver as an aiohttp application."""
    app = web.Application(middlewares=[_errors, _inject_faults, _authenticate],
                          client_max_size=3 * 1024 * 1024)
    app[STATE] = state
    app.router.add_route("*", "/{tail:.*}", _dispatch)

    async def end_watches(app: web.Application) -> None:
        for queue in list(state.watches):
            queue.put_nowait(None)

    async def close_webhook_clients(app: web.Application) -> None:
        await state.admission.close()

    app.on_shutdown.append(end_watches)
    app.on_cleanup.append(close_webhook_clients)
    return app


# -- routing -------------------------------------------------------------------


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("true", "1")


async def _dispatch(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    path = request.path.rstrip("/") or "/"
    if path in OPEN_PATHS:
        return web.Response(text="ok")
    doc = _discovery(path, state)
    if doc is not None:
        if request.method != "GET":
            raise ApiError(405, "MethodNotAllowed",
                           "the server does not allow this method on the requested resource")
        return _json(doc)
    target = parse_target(path)
    if target is None:
        raise errors.path_not_found()
    verbs = Verbs(state, request, target)
    method = request.method
    if method == "GET" and target.name is None:
        if target.watch_path or _flag(request, "watch"):
            return await verbs.watch()
        return verbs.get_list()
    if target.name is None:
        if method == "POST" and (target.namespace or not target.rt.namespaced):
            return await verbs.create()
        if method == "DELETE" and not target.subresource:
            return await verbs.delete_collection()
    elif method == "GET":
        return _json(state.store.get(target.rt, target.namespace, target.name))
    elif method == "PUT":
        return await verbs.replace()
    elif method == "PATCH":
        return await verbs.patch()
    elif method == "DELETE" and not target.subresource:
        return await verbs.delete()
    raise errors.method_not_allowed(target.rt)


def _discovery(path: str, state: ServerState) -> Any | None:
    segs = [s for s in path.split("/") if s]
    if path == "/version":
        return discovery.VERSION
    if path == "/api":
        return discovery.api_versions(state.address)
    if path == "/api/v1":
        return discovery.resource_list("", "v1")
    if path == "/apis":
        return discovery.api_group_list()
    if segs[:1] == ["apis"] and len(segs) == 2:
        return discovery.api_group(segs[1]) or _raise(errors.path_not_found())
    if segs[:1] == ["apis"] and len(segs) == 3:
        return discovery.resource_list(segs[1], segs[2]) or _raise(errors.path_not_found())
    if path == "/openapi/v3":
        return discovery.openapi_v3_root()
    if segs[:2] == ["openapi", "v3"]:
        gv = segs[2:]
        doc = None
        if gv[:1] == ["api"] and len(gv) == 2:
            doc = discovery.openapi_v3_doc("", gv[1])
        elif gv[:1] == ["apis"] and len(gv) == 3:
            doc = discovery.openapi_v3_doc(gv[1], gv[2])
        return doc or _raise(errors.path_not_found())
    return None


def _raise(err: ApiError) -> Any:
    raise err


# -- verbs ---------------------------------------------------------------------


class Verbs:
    """The REST verbs on one resource target, for one request."""

    def __init__(self, state: ServerState, request: web.Request, target: Target) -> None:
        self.state, self.request, self.t = state, request, target
        self.rt = target.rt
        self.store = state.store
        self.user: User = request[USER]
        self.dry_run = "All" in request.query.getall("dryRun", [])

    # helpers

    async def _body(self) -> Any:
        raw = await self.request.read()
        if not raw.strip():
            return None
        media = self.request.content_type
        if media == protobuf.MEDIA_TYPE:
            return protobuf.decode(raw)
        if self.request.method != "PATCH" and media not in (*BODY_TYPES, "application/octet-stream"):
            raise errors.unsupported_media_type(BODY_TYPES)
        try:
            if "yaml" in self.request.content_type:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"error decoding request body: {exc}") from None

    def _options(self, kind: str) -> Obj:
        options: Obj = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if self.dry_run:
            options["dryRun"] = ["All"]
        for param in ("fieldManager", "fieldValidation"):
            if param in self.request.query:
                options[param] = self.request.query[param]
        return options

    def _attributes(self, op: str, name: str, obj: Obj | None, old: Obj | None,
                    options: Obj) -> Attributes:
        return Attributes(op, self.rt, self.t.subresource, self.t.namespace or "", name, obj,
                          old, self.user, self.dry_run, options, self.request[WARNINGS].texts)

    def _typed_body(self, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type "
                                     f"{self.rt.kind})")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if (api_version and api_version != self.rt.api_version) or (kind and kind != self.rt.kind):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({self.rt.api_version})" if api_version != self.rt.api_version else
                f"the kind in the data ({kind}) does not match the expected kind ({self.rt.kind})")
        obj = copy.deepcopy(body)
        obj["apiVersion"], obj["kind"] = self.rt.api_version, self.rt.kind
        meta = obj.setdefault("metadata", {})
        if self.rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != self.t.namespace:
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            meta["namespace"] = self.t.namespace
        return obj

    # reads

    def _selectors(self) -> tuple[LabelMatcher, list[tuple[str, str, str]]]:
        labels = parse_label_selector(self.request.query.get("labelSelector"))
        fields = parse_field_selector(self.request.query.get("fieldSelector"))
        for label, _, _ in fields:
            if self.rt.field_value({}, label) is None:
                raise errors.bad_request(f"field label not supported: {label}")
        return labels, fields

    def get_list(self) -> web.Response:
        labels, fields = self._selectors()
        # The stored objects themselves (no deep copy): this answer only serialises them.
        items, rv = self.store.select(self.rt, self.t.namespace, labels, fields, shared=True)
        meta: Obj = {"resourceVersion": rv}
        token = self.request.query.get("continue")
        if token:
            try:
                state = json.loads(base64.urlsafe_b64decode(token))
                start, list_rv = str(state["start"]), int(state["rv"])
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request("continue key is not valid: incorrect encoded start "
                                         "resourceVersion (version meta.k8s.io/v1)") from None
            if list_rv < self.store.floor:
                raise errors.expired(CONTINUE_TOO_OLD)
            items = [i for i in items if _position(i) > start]
            meta["resourceVersion"] = str(list_rv)
        limit = int(self.request.query.get("limit") or 0)
        if limit and len(items) > limit:
            rest = len(items) - limit
            items = items[:limit]
            next_token = {"rv": int(meta["resourceVersion"]), "start": _position(items[-1])}
            meta["continue"] = base64.urlsafe_b64encode(_dumps(next_token).encode()).decode()
            meta["remainingItemCount"] = rest
        # List items carry no kind/apiVersion, as from the apiserver: a shallow copy
        # without them, never a change to the shared stored object.
        listed = [{k: v for k, v in item.items() if k not in _TYPE_KEYS} for item in items]
        return _json({"kind": f"{self.rt.kind}List", "apiVersion": self.rt.api_version,
                      "metadata": meta, "items": listed})

    async def watch(self) -> web.StreamResponse:
        labels, fields = self._selectors()
        query = self.request.query
        if self.t.name:
            fields = [*fields, ("metadata.name", "=", self.t.name)]
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        ns, rt = self.t.namespace, self.rt

        def deliver(event: Event) -> None:
            if event.rt == rt and (ns is None or event.obj["metadata"].get("namespace") == ns):
                loop.call_soon_threadsafe(queue.put_nowait, event)

        response = web.StreamResponse(headers={"Content-Type": "application/json",
                                               "Cache-Control": "no-cache, private"})
        initial = query.get("sendInitialEvents") == "true"
        since = None if initial else query.get("resourceVersion")
        try:
            first, stop = self.store.watch(rt, ns, since, deliver)
        except ApiError as err:
            if err.code != 410:
                raise
            await response.prepare(self.request)
            await response.write(_line("ERROR", err.status()))
            await response.write_eof()
            return response
        self.state.watches.add(queue)
        bookmarks = _flag(self.request, "allowWatchBookmarks")
        # 0 or absent: the apiserver picks a long random timeout (MinRequestTimeout..2x).
        timeout = float(query.get("timeoutSeconds") or 0) or 1800.0
        deadline = loop.time() + timeout
        try:
            await response.prepare(self.request)
            for event in first:
                await self._send(response, event, labels, fields)
            if initial:
                await response.write(_line("BOOKMARK", self._bookmark(
                    {"k8s.io/initial-events-end": "true"})))
            while (remaining := deadline - loop.time()) > 0:
                wait = min(remaining, self.state.bookmark_interval) if bookmarks else remaining
                try:
                    item = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    if bookmarks and deadline - loop.time() > 0:
                        await response.write(_line("BOOKMARK", self._bookmark()))
                    continue
                if item is None:
                    break
                await self._send(response, item, labels, fields)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            stop()
            self.state.watches.discard(queue)
        return response

    def _bookmark(self, annotations: dict[str, str] | None = None) -> Obj:
        meta: Obj = {"resourceVersion": self.store.resource_version}
        if annotations:
            meta["annotations"] = annotations
        return {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta}

    async def _send(self, response: web.StreamResponse, event: Event, labels: LabelMatcher,
                    fields: list[tuple[str, str, str]]) -> None:
        now = selected(self.rt, event.obj, labels, fields)
        before = event.old is not None and selected(self.rt, event.old, labels, fields)
        kind = event.type
        if kind == "MODIFIED":
            kind = {(True, True): "MODIFIED", (True, False): "ADDED",
                    (False, True): "DELETED"}.get((now, before), "")
        elif not now:
            kind = ""
        if kind:
            await response.write(_line(kind, event.obj))

    # writes

    async def create(self) -> web.Response:
        obj = self._typed_body(await self._body())
        if self.rt.namespaced:
            with self.store.lock:
                self.store.require_namespace(self.t.namespace or "")
        obj = apply_defaults(self.rt, _prepare_for_create(self.rt, obj))
        meta = obj["metadata"]
        a = self._attributes("CREATE", meta.get("name", ""), obj, None,
                             self._options("CreateOptions"))
        obj = await self.state.admission.mutate(a) or obj
        obj = apply_defaults(self.rt, self.store.prepare_create(self.rt, obj))
        a.obj, a.name = obj, obj["metadata"]["name"]
        await self.state.admission.validate(a)
        if self.dry_run:
            return _json(obj, 201)
        return _json(self.store.commit_create(self.rt, obj), 201)

    async def replace(self) -> web.Response:
        obj = self._typed_body(await self._body())
        name = obj["metadata"].get("name")
        if name != self.t.name:
            raise errors.bad_request(f"the name of the object ({name}) does not match the name "
                                     f"on the URL ({self.t.name})")
        return await self._update(lambda old: obj)

    async def patch(self) -> web.Response:
        content_type = self.request.headers.get("Content-Type", "")
        if content_type.startswith(APPLY_PATCH):
            raise errors.unsupported_media_type(PATCH_TYPES)
        body = await self._body()
        return await self._update(lambda old: self._typed_body(
            apply_patch(content_type, old, body)))

    async def _update(self, compute: Callable[[Obj], Obj]) -> web.Response:
        name = self.t.name or ""
        for _ in range(20):  # GuaranteedUpdate retries when storage moved underneath
            old = self.store.get(self.rt, self.t.namespace, name)
            new = apply_defaults(self.rt, compute(copy.deepcopy(old)))
            wanted_rv = new["metadata"].get("resourceVersion") or None
            a = self._attributes("UPDATE", name, new, old, self._options("UpdateOptions"))
            new = await self.state.admission.mutate(a) or new
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(self.rt, name)
            prepared = apply_defaults(self.rt, self.store.prepare_update(
                self.rt, old, new, self.t.subresource))
            a.obj = prepared
            await self.state.admission.validate(a)
            if self.dry_run:
                return _json(prepared)
            try:
                return _json(self.store.commit_update(self.rt, prepared,
                                                      old["metadata"]["resourceVersion"]))
            except ApiError as err:
                if err.reason != "Conflict" or wanted_rv:
                    raise
        raise errors.conflict(self.rt, name)

    async def _delete_one(self, name: str, options: Obj) -> tuple[Obj, bool]:
        old = self.store.get(self.rt, self.t.namespace, name)
        a = self._attributes("DELETE", name, None, old, options)
        await self.state.admission.mutate(a)
        Store.check_preconditions(self.rt, old, options.get("preconditions"))
        await self.state.admission.validate(a)
        if self.dry_run:
            return old, True
        return self.store.delete(self.rt, self.t.namespace, name, options.get("preconditions"))

    def _delete_options(self, body: Any) -> Obj:
        options: Obj = dict(body) if isinstance(body, dict) else {}
        options.update({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"})
        for param in ("propagationPolicy", "gracePeriodSeconds"):
            if param in self.request.query:
                value = self.request.query[param]
                options[param] = int(value) if param == "gracePeriodSeconds" else value
        if self.dry_run:
            options["dryRun"] = ["All"]
        policy = options.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: '
                           f'propagationPolicy: Unsupported value: "{policy}"')
        return options

    async def delete(self) -> web.Response:
        options = self._delete_options(await self._body())
        obj, gone = await self._delete_one(self.t.name or "", options)
        if not gone or self.rt.plural in ("pods", "namespaces"):
            return _json(obj)
        details: Obj = {"name": obj["metadata"]["name"]}
        if self.rt.group:
            details["group"] = self.rt.group
        details.update({"kind": self.rt.plural, "uid": obj["metadata"].get("uid")})
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Success", "details": details})

    async def delete_collection(self) -> web.Response:
        options = self._delete_options(await self._body())
        labels, fields = self._selectors()
        items, rv = self.store.select(self.rt, self.t.namespace, labels, fields)
        deleted = []
        for item in items:
            try:
                obj, _ = await self._delete_one(item["metadata"]["name"], options)
            except ApiError as err:
                if err.code != 404:
                    raise
                continue
            obj.pop("kind", None)
            obj.pop("apiVersion", None)
            deleted.append(obj)
        return _json({"kind": f"{self.rt.kind}List", "apiVersion": self.rt.api_version,
                      "metadata": {"resourceVersion": rv}, "items": deleted})


def _prepare_for_create(rt: ResourceType, obj: Obj) -> Obj:
    """The strategies' PrepareForCreate: status is not the client's to set."""
    if rt.plural == "jobs":
        obj["status"] = {}
    elif rt.plural == "pods":
        obj["status"] = {"phase": "Pending"}
    elif rt.plural == "services":
        obj["status"] = {"loadBalancer": {}}
    return obj


_TYPE_KEYS = ("kind", "apiVersion")


def _position(obj: Obj) -> str:
    meta = obj["metadata"]
    return f'{meta.get("namespace", "")}/{meta["name"]}'


def _line(kind: str, obj: Obj) -> bytes:
    return (_dumps({"type": kind, "object": obj}) + "\n").encode()
