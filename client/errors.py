"""Outcomes of the submit-path client that are not "acquired".

Busy is not an error (``acquire()`` returns it). Everything here is raised:
a coordination error (the API could not be read or written: callers fail
closed and never read it as busy), a lost Lease, and the three ways
:func:`client.slot.run_slot` can end without a slot.
"""

from __future__ import annotations

from elbgate.kube.api import ApiError, ApiUnavailable, NoCredentials

ADMISSION_DENIAL_MARK = "admission webhook"
"""Prefix of the apiserver's message for a webhook denial (not an RBAC problem)."""


class CoordinationError(RuntimeError):
    """The Lease or the census could not be read or written.

    ``operation`` says what was attempted (``"GET lease"``), ``cause`` is the
    underlying :class:`ApiError` / :class:`ApiUnavailable`, ``status`` the HTTP
    code when the API answered (``None`` when it did not). The message says what
    to fix.
    """

    def __init__(self, operation: str, namespace: str, cause: Exception, host: str = "") -> None:
        self.operation = operation
        self.namespace = namespace
        self.cause = cause
        self.host = host
        self.status: int | None = cause.code if isinstance(cause, ApiError) else None
        super().__init__(explain_api_failure(operation, namespace, cause, host))


class LeaseLost(RuntimeError):
    """The Lease this client held now has another holder, or none."""


class LeaseBusy(RuntimeError):
    """Raised only by ``with SubmitLease(...)``: someone else holds the Lease."""


class SlotUnavailable(RuntimeError):
    """``run_slot`` ended without a slot for a reason that is not an API failure."""

    def __init__(self, message: str, waited_seconds: float) -> None:
        self.waited_seconds = waited_seconds
        super().__init__(message)


class SubmitSlotTimeout(SlotUnavailable):
    """The Lease stayed busy for ``BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS``."""


class CapacityTimeout(SlotUnavailable):
    """The namespace stayed at its ceiling for ``BLAST_CAPACITY_WAIT_MAX_SECONDS``."""


class SlotCancelled(SlotUnavailable):
    """The caller's cancel event was set while waiting."""


def explain_api_failure(operation: str, namespace: str, cause: Exception, host: str = "") -> str:
    """One message that names the failure and what to fix: the same text goes to
    a Celery log and to an operator's terminal."""
    where = f" at {host}" if host else ""
    if isinstance(cause, NoCredentials):
        return (
            f"{operation} in namespace {namespace!r}: no valid credentials for the Kubernetes "
            f"API{where} ({cause}); refresh the kubeconfig login (e.g. `az aks get-credentials`, "
            "kubelogin) or the token. Not treated as busy: nothing was submitted."
        )
    if isinstance(cause, ApiUnavailable):
        return (
            f"{operation} in namespace {namespace!r}: the Kubernetes API{where} did not answer "
            f"({cause}); check that the cluster is reachable and that the kubeconfig context "
            "points at it. Not treated as busy: nothing was submitted."
        )
    if not isinstance(cause, ApiError):
        return f"{operation} in namespace {namespace!r}: {cause}"
    if ADMISSION_DENIAL_MARK in cause.message:
        return f"{operation} in namespace {namespace!r} was refused ({cause.code}): {cause.message}"
    if cause.code == 401:
        return (
            f"{operation}: the Kubernetes API{where} rejected the credentials (401 Unauthorized); "
            "refresh the kubeconfig login (e.g. `az aks get-credentials`, kubelogin) or the token"
        )
    if cause.code == 403:
        return (
            f"{operation} in namespace {namespace!r} is forbidden by RBAC (403): {cause.message}; "
            "the submitting identity needs get/create/update on "
            "leases.coordination.k8s.io and list on jobs.batch in that namespace. The API "
            "server answers 403 also when namespace "
            f"{namespace!r} does not exist: check -n/--namespace and the kubeconfig context"
        )
    if cause.code == 404 and "namespace" in cause.message.lower():
        return (
            f"{operation}: namespace {namespace!r} does not exist ({cause.message}); "
            "pass the right -n/--namespace"
        )
    return (
        f"{operation} in namespace {namespace!r} failed: {cause.code} {cause.reason}: "
        f"{cause.message}. Not treated as busy: failing closed."
    )
