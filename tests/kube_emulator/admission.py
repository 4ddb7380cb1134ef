"""Dynamic admission: mutating then validating webhooks, called the way the apiserver calls them."""

from __future__ import annotations

import asyncio
import base64
import copy
import ssl
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
import jsonpatch

from . import errors, match_conditions
from .errors import ApiError
from .resources import Obj, ResourceType, by_plural
from .selectors import label_selector_matcher
from .store import Store
from .users import User

Endpoint = tuple[str, int]
Services = dict[tuple[str, str], Endpoint | list[Endpoint]]
"""Where a webhook Service points: one ``(host, port)``, or a list of them that calls
are spread over in turn, as kube-proxy spreads a Service over its ready endpoints
(remove an endpoint from the list as the Endpoints controller would when it dies)."""


@dataclass
class Attributes:
    """One admission request (admission.Attributes)."""

    operation: str  # CREATE | UPDATE | DELETE
    rt: ResourceType
    subresource: str
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    user: User
    dry_run: bool
    options: Obj
    warnings: list[str] = field(default_factory=list)


class CallError(Exception):
    """webhookutil.ErrCallingWebhook: subject to failurePolicy."""


def _rule_matches(rule: Obj, a: Attributes) -> bool:
    def has(values: list[str] | None, value: str) -> bool:
        return bool(values) and ("*" in values or value in values)  # type: ignore[operator]

    if not (has(rule.get("operations"), a.operation) and has(rule.get("apiGroups"), a.rt.group)
            and has(rule.get("apiVersions"), a.rt.version)):
        return False
    scope = rule.get("scope") or "*"
    if (scope == "Cluster" and a.namespace) or (scope == "Namespaced" and not a.namespace):
        return False
    for resource in rule.get("resources") or []:
        res, _, sub = resource.partition("/")
        if (res in ("*", a.rt.plural)) and (sub == "*" or sub == a.subresource):
            return True
    return False


def _labels(obj: Obj | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


class AdmissionChain:
    """Runs the webhook configurations stored in `store` for each write."""

    def __init__(self, store: Store, services: Services) -> None:
        self.store = store
        self.services = services
        # Like the apiserver's per-webhook client: pooled keep-alive connections and
        # one TLS context per caBundle, not a new handshake for every call.
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._turn: dict[tuple[str, str], int] = {}

    def _endpoint(self, ref: tuple[str, str]) -> Endpoint | None:
        target = self.services.get(ref)
        if isinstance(target, list):
            if not target:
                return None
            turn = self._turn.get(ref, 0)
            self._turn[ref] = turn + 1
            return target[turn % len(target)]
        return target

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def _context(self, ca_bundle: str) -> ssl.SSLContext:
        ctx = self._contexts.get(ca_bundle)
        if ctx is None:
            ctx = ssl.create_default_context(
                cadata=base64.b64decode(ca_bundle).decode() if ca_bundle else None
            )
            self._contexts[ca_bundle] = ctx
        return ctx

    async def close(self) -> None:
        """Close pooled webhook connections (on server shutdown)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- selection -----------------------------------------------------------

    def _hooks(self, plural: str) -> list[Obj]:
        configs, _ = self.store.select(by_plural(plural), None)
        configs.sort(key=lambda c: c["metadata"]["name"])
        return [hook for c in configs for hook in c.get("webhooks") or []]

    def _namespace_labels(self, a: Attributes) -> dict[str, str] | None:
        if a.rt.plural == "namespaces":
            return None
        ns = self.store.find(by_plural("namespaces"), None, a.namespace)
        return _labels(ns)

    def _matches(self, hook: Obj, a: Attributes, request: Obj) -> bool:
        if not any(_rule_matches(rule, a) for rule in hook.get("rules") or []):
            return False
        ns_match = label_selector_matcher(hook.get("namespaceSelector"))
        if a.rt.plural == "namespaces":
            if not (ns_match(_labels(a.obj)) or ns_match(_labels(a.old))):
                return False
        elif a.rt.namespaced and not ns_match(self._namespace_labels(a) or {}):
            return False
        obj_match = label_selector_matcher(hook.get("objectSelector"))
        if not (obj_match(_labels(a.obj)) or obj_match(_labels(a.old))):
            return False
        conditions = hook.get("matchConditions") or []
        if conditions:
            result = match_conditions.evaluate(
                conditions,
                {"object": a.obj, "oldObject": a.old, "request": request,
                 "params": None, "authorizer": None},
                hook.get("failurePolicy", "Fail"),
            )
            if result.error:
                raise errors.forbidden(a.rt, a.name, result.error)
            return result.matches
        return True

    # -- the chain -----------------------------------------------------------

    async def mutate(self, a: Attributes) -> Obj | None:
        """Run mutating webhooks in order; returns the (patched) object."""
        for hook in self._hooks("mutatingwebhookconfigurations"):
            request = self._request(a)
            if not self._matches(hook, a, request):
                continue
            response = await self._invoke(hook, a, request, mutating=True)
            if response is None:
                continue
            patch = response.get("patch")
            if patch and a.obj is not None:
                ops = jsonpatch.JsonPatch.from_string(base64.b64decode(patch).decode())
                try:
                    a.obj = ops.apply(a.obj)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    raise errors.internal(f'admission webhook "{hook["name"]}" attempted to '
                                          f"modify the object, which is not supported for this "
                                          f"operation: {exc}") from None
        return a.obj

    async def validate(self, a: Attributes) -> None:
        """Run all matching validating webhooks concurrently; the first failure wins."""
        calls = []
        for hook in self._hooks("validatingwebhookconfigurations"):
            request = self._request(a)
            if self._matches(hook, a, request):
                calls.append(self._invoke(hook, a, request, mutating=False))
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _invoke(self, hook: Obj, a: Attributes, request: Obj, mutating: bool) -> Obj | None:
        """Call one webhook; None when it failed open. Denials raise the apiserver's Status."""
        name = hook["name"]
        if a.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise errors.bad_request(f'admission webhook "{name}" does not support dry run')
        try:
            response = await self._call(hook, request, mutating)
        except CallError as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return None
            raise errors.internal(f'failed calling webhook "{name}": {exc}') from None
        a.warnings.extend(str(w) for w in response.get("warnings") or [])
        if not response.get("allowed"):
            raise _denial(name, response.get("status"))
        return response

    def _request(self, a: Attributes) -> Obj:
        gvk = {"group": a.rt.group, "version": a.rt.version, "kind": a.rt.kind}
        gvr = {"group": a.rt.group, "version": a.rt.version, "resource": a.rt.plural}
        request: Obj = {"uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr}
        if a.subresource:
            request["subResource"] = a.subresource
        request.update({"requestKind": gvk, "requestResource": gvr})
        if a.subresource:
            request["requestSubResource"] = a.subresource
        if a.name:
            request["name"] = a.name
        if a.namespace:
            request["namespace"] = a.namespace
        request.update({
            "operation": a.operation,
            "userInfo": a.user.user_info(),
            "object": copy.deepcopy(a.obj),
            "oldObject": copy.deepcopy(a.old),
            "dryRun": a.dry_run,
            "options": a.options,
        })
        return request

    async def _call(self, hook: Obj, request: Obj, mutating: bool) -> Obj:
        config = hook.get("clientConfig") or {}
        timeout = int(hook.get("timeoutSeconds") or 10)
        if config.get("service"):
            svc = config["service"]
            host = f'{svc["name"]}.{svc["namespace"]}.svc'
            port = int(svc.get("port") or 443)
            path = svc.get("path") or ""
            shown = f"https://{host}:{port}{path}?timeout={timeout}s"
            target = self._endpoint((svc["namespace"], svc["name"]))
            if target is None:
                raise CallError(f'failed to call webhook: service "{svc["name"]}" not found')
            url = f"https://{target[0]}:{target[1]}{path}?timeout={timeout}s"
            dial = f"{target[0]}:{target[1]}"
        else:
            parts = urlsplit(config.get("url", ""))
            host, dial = parts.hostname or "", parts.netloc
            sep = "&" if parts.query else "?"
            url = shown = f"{config.get('url')}{sep}timeout={timeout}s"
        ctx = self._context(config.get("caBundle") or "")
        review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                  "request": request}
        try:
            async with self._client().post(
                url, json=review, ssl=ctx, server_hostname=host,
                timeout=aiohttp.ClientTimeout(total=timeout),
                headers={"Accept": "application/json, */*"},
            ) as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError:
            raise CallError(f'failed to call webhook: Post "{shown}": context deadline exceeded'
                            ) from None
        except aiohttp.ClientConnectorCertificateError as exc:
            raise CallError(f'failed to call webhook: Post "{shown}": '
                            f"{_tls_error(exc, host)}") from None
        except (aiohttp.ClientConnectorError, aiohttp.ClientOSError) as exc:
            if isinstance(exc.__cause__, ssl.SSLError) or isinstance(exc, aiohttp.ClientSSLError):
                why = f"remote error: tls: {exc}"
            else:
                why = f"dial tcp {dial}: connect: connection refused"
            raise CallError(f'failed to call webhook: Post "{shown}": {why}') from None
        except aiohttp.ClientError as exc:
            raise CallError(f'failed to call webhook: Post "{shown}": EOF ({exc})') from None
        if status == 404:
            raise CallError("failed to call webhook: the server could not find the requested "
                            "resource")
        if status >= 300:
            text = body.decode(errors="replace")[:200]
            raise CallError(f'failed to call webhook: an error on the server ("{text}") '
                            f"has prevented the request from succeeding")
        return _verify(request["uid"], body, mutating)


def _tls_error(exc: aiohttp.ClientConnectorCertificateError, host: str) -> str:
    cert_error = exc.certificate_error
    if getattr(cert_error, "verify_code", None) == 62:
        return f"tls: failed to verify certificate: x509: certificate is not valid for {host}"
    return "tls: failed to verify certificate: x509: certificate signed by unknown authority"


def _verify(uid: str, body: bytes, mutating: bool) -> Obj:
    """webhookrequest.VerifyAdmissionResponse for admission.k8s.io/v1."""
    import json

    prefix = "received invalid webhook response: "
    try:
        review = json.loads(body)
    except ValueError as exc:
        raise CallError(f"{prefix}{exc}") from None
    if not isinstance(review, dict):
        raise CallError(f"{prefix}expected webhook response of admission.k8s.io/v1, "
                        f"Kind=AdmissionReview, got /, Kind=")
    api_version, kind = review.get("apiVersion", ""), review.get("kind", "")
    if (api_version, kind) != ("admission.k8s.io/v1", "AdmissionReview"):
        shown = api_version if "/" in api_version else f"/{api_version}"
        raise CallError(f"{prefix}expected webhook response of admission.k8s.io/v1, "
                        f"Kind=AdmissionReview, got {shown}, Kind={kind}")
    response = review.get("response")
    if not isinstance(response, dict):
        raise CallError(f"{prefix}webhook response was absent")
    if response.get("uid") != uid:
        raise CallError(f'{prefix}expected response.uid="{uid}", got "{response.get("uid", "")}"')
    patch, patch_type = response.get("patch"), response.get("patchType") or ""
    if patch and not mutating:
        raise CallError(f"{prefix}validating webhook may not return a patch")
    if patch and patch_type != "JSONPatch":
        raise CallError(f'{prefix}webhook returned invalid patchType: "{patch_type}"')
    if not patch and patch_type:
        raise CallError(f'{prefix}webhook returned patchType "{patch_type}" but no patch')
    return response


def _denial(name: str, status: Obj | None) -> ApiError:
    """webhookerrors.ToStatusErr."""
    status = dict(status or {})
    code = int(status.get("code") or 0)
    code = max(code, 400)
    denied_by = f'admission webhook "{name}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    return ApiError(code, str(status.get("reason") or ""), message, status.get("details") or None)
