"""Status errors shaped exactly like the kube-apiserver's (k8s.io/apimachinery api/errors)."""

from __future__ import annotations

from typing import Any

from .resources import ResourceType

MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


class ApiError(Exception):
    """An error the server answers with a `Status` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        """The `Status` object, field order as the apiserver writes it."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body

    @classmethod
    def from_status(cls, status: dict[str, Any]) -> ApiError:
        return cls(
            int(status.get("code") or 500),
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            status.get("details") or None,
        )


def _details(rt: ResourceType, name: str, kind: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name} if name else {}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = kind or rt.plural
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    msg = f'{rt.qualified} "{name}" already exists'
    return ApiError(409, "AlreadyExists", msg, _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str = MODIFIED) -> ApiError:
    msg = f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}'
    return ApiError(409, "Conflict", msg, _details(rt, name))


def forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
    msg = f'{rt.qualified} "{name}" is forbidden: {why}'
    return ApiError(403, "Forbidden", msg, _details(rt, name))


def invalid(rt: ResourceType, name: str, field: str, problem: str) -> ApiError:
    """422 Invalid: `Job.batch "x" is invalid: field: problem`."""
    qualified_kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    details = _details(rt, name, kind=rt.kind)
    details["causes"] = [{"reason": "FieldValueRequired", "message": problem, "field": field}]
    msg = f'{qualified_kind} "{name}" is invalid: {field}: {problem}'
    return ApiError(422, "Invalid", msg, details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def internal(message: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(rt: ResourceType) -> ApiError:
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                    _details(rt, ""))


def unsupported_media_type(accepted: list[str]) -> ApiError:
    """415, as apiserver's NewUnsupportedMediaTypeError words it."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def by_code(code: int, message: str = "") -> ApiError:
    """A Status for an injected fault: the reason the apiserver uses for that code."""
    reasons = {
        400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
        405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 422: "Invalid",
        429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
        504: "Timeout",
    }
    texts = {
        429: "Too many requests, please try again later.",
        500: "Internal error occurred: injected fault",
        503: "The server is currently unable to handle the request",
        504: "The server was unable to return a response in the time allotted, "
        "but may still be processing the request",
    }
    err = ApiError(code, reasons.get(code, ""), message or texts.get(code, f"injected fault {code}"))
    if code == 429:
        err.headers["Retry-After"] = "1"
        err.details = {"retryAfterSeconds": 1}
    return err
