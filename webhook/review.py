"""The AdmissionReview v1 wire format, typed once.

``AdmissionRequest`` is what a handler reads; ``AdmissionResponse`` is what it
returns, built with the controller-runtime style helpers :func:`allowed`,
:func:`denied`, :func:`patched` and :func:`errored`. The HTTP layer calls
:meth:`AdmissionResponse.complete` to echo the request uid, so a handler never
has to remember it.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

STATUS_REASONS: dict[int, str] = {
    400: "BadRequest",
    403: "Forbidden",
    409: "Conflict",
    413: "RequestEntityTooLarge",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}
"""metav1.StatusReason for the codes elb-gate answers with (what kubectl prints in parentheses)."""


class MalformedReview(ValueError):
    """The body is not an AdmissionReview v1 with a ``request.uid``, or one of its objects
    is not a JSON object: an HTTP 400. ``field`` names the offending field and ``uid`` is
    the request's uid when it could be read (both are also in the message)."""

    def __init__(self, message: str, field: str = "", uid: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.uid = uid


def _json_kind(value: object) -> str:
    """How JSON would name ``value``'s type, for a message."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


SECTIONS = ("metadata", "spec", "status")
"""An object's parts that every kind elb-gate judges (Job, Lease) has as JSON objects."""


def _object_or_none(req: Mapping[str, Any], key: str, uid: str) -> Mapping[str, Any] | None:
    """``request.<key>``: a JSON object, or absent/null (DELETE, CONNECT), and so are its
    :data:`SECTIONS`. Anything else is malformed — never read as "no object", which would
    admit it unjudged, nor left for a decision to trip over."""
    value = req.get(key)
    parts = {key: value}
    if isinstance(value, Mapping):
        parts |= {f"{key}.{name}": value.get(name) for name in SECTIONS}
    for where, part in parts.items():
        if part is not None and not isinstance(part, Mapping):
            raise MalformedReview(
                f"request.{where} must be a JSON object or null, got {_json_kind(part)} "
                f"(request.uid {uid!r})",
                field=f"request.{where}",
                uid=uid,
            )
    return value


@dataclass(frozen=True, slots=True)
class UserInfo:
    """``request.userInfo``: who is asking."""

    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: object) -> UserInfo:
        if not isinstance(data, Mapping):
            return cls()
        extra_raw = data.get("extra")
        extra: dict[str, tuple[str, ...]] = {}
        if isinstance(extra_raw, Mapping):
            for key, values in extra_raw.items():
                if isinstance(values, list):
                    extra[str(key)] = tuple(str(v) for v in values)
        groups = data.get("groups")
        return cls(
            username=str(data.get("username") or ""),
            uid=str(data.get("uid") or ""),
            groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
            extra=extra,
        )

    def first_extra(self, key: str) -> str:
        """The first value of ``userInfo.extra[key]``, ``""`` when absent."""
        values = self.extra.get(key) or ()
        return values[0] if values else ""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """``AdmissionReview.request``, with the objects kept as raw dicts."""

    uid: str
    operation: str
    """CREATE, UPDATE, DELETE or CONNECT."""
    namespace: str
    name: str
    resource: str
    """``request.resource.resource``, e.g. ``jobs`` or ``leases``."""
    sub_resource: str
    user: UserInfo
    obj: Mapping[str, Any] | None
    """``request.object`` (``None`` on DELETE)."""
    old_object: Mapping[str, Any] | None
    dry_run: bool

    @classmethod
    def from_review(cls, review: object) -> AdmissionRequest:
        """Parse a decoded AdmissionReview; :class:`MalformedReview` when it is not one."""
        if not isinstance(review, Mapping):
            raise MalformedReview("body is not a JSON object")
        if review.get("kind") != KIND or review.get("apiVersion") != API_VERSION:
            raise MalformedReview(
                f"expected kind {KIND} apiVersion {API_VERSION}, got "
                f"kind {review.get('kind')!r} apiVersion {review.get('apiVersion')!r}"
            )
        req = review.get("request")
        if not isinstance(req, Mapping):
            raise MalformedReview("AdmissionReview has no request object")
        uid = req.get("uid")
        if not isinstance(uid, str) or not uid:
            raise MalformedReview("AdmissionReview request.uid is missing or empty")
        resource = req.get("resource")
        obj = _object_or_none(req, "object", uid)
        old = _object_or_none(req, "oldObject", uid)
        return cls(
            uid=uid,
            operation=str(req.get("operation") or ""),
            namespace=str(req.get("namespace") or ""),
            name=str(req.get("name") or ""),
            resource=str(resource.get("resource") or "") if isinstance(resource, Mapping) else "",
            sub_resource=str(req.get("subResource") or ""),
            user=UserInfo.from_dict(req.get("userInfo")),
            obj=obj,
            old_object=old,
            dry_run=req.get("dryRun") is True,
        )


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """``AdmissionReview.response``; build with the helpers below."""

    allowed: bool
    code: int = 200
    reason: str = ""
    """metav1.StatusReason (Forbidden, Conflict, ...); empty when allowed."""
    message: str = ""
    patch: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    uid: str = ""

    def with_warnings(self, *warnings: str) -> AdmissionResponse:
        """The same response with ``warnings`` appended (empty strings dropped)."""
        return dataclasses.replace(self, warnings=self.warnings + tuple(w for w in warnings if w))

    def complete(self, uid: str) -> AdmissionResponse:
        """Echo the request uid: the one step every response goes through."""
        return dataclasses.replace(self, uid=uid)

    def to_review(self) -> dict[str, Any]:
        """The AdmissionReview v1 JSON object the apiserver expects."""
        response: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if not self.allowed or self.code != 200 or self.message:
            status: dict[str, Any] = {"code": self.code}
            if not self.allowed:
                status["status"] = "Failure"
            if self.reason:
                status["reason"] = self.reason
            if self.message:
                status["message"] = self.message
            response["status"] = status
        if self.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(list(self.patch))).decode()
        if self.warnings:
            response["warnings"] = list(self.warnings)
        return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def allowed(message: str = "") -> AdmissionResponse:
    """Admit unchanged."""
    return AdmissionResponse(allowed=True, message=message)


def denied(code: int, reason: str, message: str) -> AdmissionResponse:
    """A policy denial: HTTP 200 with ``allowed: false``; the apiserver returns
    ``code``/``reason`` to the client with ``message`` after
    ``admission webhook "<name>" denied the request: ``."""
    return AdmissionResponse(allowed=False, code=code, reason=reason, message=message)


def patched(ops: Iterable[Mapping[str, Any]]) -> AdmissionResponse:
    """Admit with a JSON Patch (an empty patch is a plain admit)."""
    return AdmissionResponse(allowed=True, patch=tuple(ops))


def errored(code: int, message: str) -> AdmissionResponse:
    """The handler could not decide (bad content, internal error): not admitted."""
    return AdmissionResponse(
        allowed=False, code=code, reason=STATUS_REASONS.get(code, ""), message=message
    )
