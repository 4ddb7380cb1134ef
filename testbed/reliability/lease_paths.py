"""The two existing submit paths' Lease protocols, as the reliability submitters speak them.

Neither path knows elb-gate; both judge expiry on their own clock, with the
``BLAST_LEASE_CLOCK_SKEW_SECONDS`` margin (30 s by default; the rig sets 1 s), and read
"someone else has it" from the API's answer. Their bodies are built the way each path
builds them, never with elb-gate's own Lease builders:

* :class:`OpenApiLease`, the in-cluster OpenAPI service: ``kubectl get lease
  --ignore-not-found -o json``, then ``kubectl create -f -`` or ``kubectl replace -f -``
  of a Lease body built from scratch on every write (so every write drops the
  annotations and sets ``acquireTime`` anew), with the ``resourceVersion`` it read;
  busy when kubectl says ``AlreadyExists``, ``Conflict`` or "Operation cannot be
  fulfilled".
* :class:`DashboardLease`, the dashboard's Celery task: raw HTTPS with a bearer token:
  GET; POST to create; PUT of the object it read, edited, to take over, renew or
  release — resetting ``acquireTime`` on every write, renewals included; 409 = busy.

Each also counts the active searches its own way (:func:`client_count`): the distinct
``elb-job-id`` of unfinished ``app=finalizer`` Jobs, unfinished meaning no
``succeeded``, no ``completionTime`` and no ``True`` ``Complete``/``Failed`` condition.

These reproductions move to ``testbed/clients.py`` (one copy for every suite) once that
module exists.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import urllib3

Outcome = Literal["acquired", "renewed", "released", "busy", "not_holder"]
BUSY_MARKERS = ("AlreadyExists", "(Conflict)", "Operation cannot be fulfilled", "already exists")


class PathError(RuntimeError):
    """An answer the path treats as an outage, not as busy (with the HTTP status seen)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:300]}")
        self.status = status


def microtime(moment: datetime) -> str:
    """A MicroTime as the API server takes it: exactly six fractional digits."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _read_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def lease_name(namespace: str) -> str:
    return f"elb-blast-submit-{namespace}"


def expired(lease: Mapping[str, Any], now: datetime, skew_seconds: float) -> bool:
    """The paths' own expiry test: ``now > renewTime + leaseDurationSeconds + skew``."""
    spec = lease.get("spec") or {}
    renewed = _read_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return True
    return now > renewed + timedelta(seconds=duration + skew_seconds)


def unfinished(job: Mapping[str, Any]) -> bool:
    status = job.get("status") or {}
    if status.get("succeeded") or status.get("completionTime"):
        return False
    return not any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def client_count(finalizers: list[Mapping[str, Any]]) -> int:
    """Active searches as both paths count them (from a LIST of ``app=finalizer`` Jobs)."""
    ids = {
        ((j.get("metadata") or {}).get("labels") or {}).get("elb-job-id")
        for j in finalizers
        if unfinished(j)
    }
    return len(ids - {None, ""})


class LeasePath:
    """What both paths share: identity, TTL, skew and their own clock."""

    source = ""

    def __init__(
        self,
        namespace: str,
        ttl_seconds: int,
        skew_seconds: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.namespace = namespace
        self.name = lease_name(namespace)
        self.ttl = ttl_seconds
        self.skew = skew_seconds
        self.clock = clock
        self.holder = f"{self.source}-{uuid.uuid4()}"
        self.last_written: dict[str, Any] | None = None
        """The Lease as this path's last successful write committed it."""

    def acquire(self) -> Outcome:
        raise NotImplementedError

    def release(self) -> Outcome:
        raise NotImplementedError

    def count(self) -> int:
        raise NotImplementedError

    def create_job(self, body: Mapping[str, Any]) -> int:
        """Create one Job: the HTTP status (200/201 created, 0 when nothing answered)."""
        raise NotImplementedError

    def close(self) -> None:
        """Drop the transport."""


class DashboardLease(LeasePath):
    """Raw HTTPS with a bearer token (the dashboard)."""

    source = "dashboard"

    def __init__(
        self, server: str, ca_file: str, token: str, namespace: str, ttl: int, skew: float
    ) -> None:
        super().__init__(namespace, ttl, skew)
        self.server = server.rstrip("/")
        self.token = token
        self.http = urllib3.PoolManager(
            maxsize=2,
            ssl_context=ssl.create_default_context(cafile=ca_file),
            timeout=urllib3.Timeout(connect=10, read=30),
            retries=False,
        )
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            resp = self.http.request(method, self.server + path, body=data, headers=headers)
        except urllib3.exceptions.HTTPError:
            return 0, {}
        try:
            decoded = json.loads(resp.data or b"{}")
        except ValueError:
            decoded = {"message": resp.data.decode(errors="replace")}
        return resp.status, decoded if isinstance(decoded, dict) else {}

    def _write(self, method: str, body: dict[str, Any], success: Outcome) -> Outcome:
        path = self.collection if method == "POST" else f"{self.collection}/{self.name}"
        status, answer = self.call(method, path, body)
        if status in (200, 201):
            self.last_written = answer
            return success
        if status == 409:
            return "busy"
        raise PathError(status, str(answer.get("message")))

    def _edited(self, current: dict[str, Any], holder: str) -> dict[str, Any]:
        now = microtime(self.clock())
        body = json.loads(json.dumps(current))
        body["spec"].update(
            {
                "holderIdentity": holder,
                "leaseDurationSeconds": self.ttl,
                "acquireTime": now,  # this path resets it on every write
                "renewTime": now,
            }
        )
        return body

    def acquire(self) -> Outcome:
        status, current = self.call("GET", f"{self.collection}/{self.name}")
        if status == 404:
            now = microtime(self.clock())
            fresh = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.holder,
                    "leaseDurationSeconds": self.ttl,
                    "acquireTime": now,
                    "renewTime": now,
                },
            }
            return self._write("POST", fresh, "acquired")
        if status != 200:
            raise PathError(status, str(current.get("message")))
        holder = (current.get("spec") or {}).get("holderIdentity") or ""
        if holder == self.holder:
            return self._write("PUT", self._edited(current, self.holder), "renewed")
        if holder and not expired(current, self.clock(), self.skew):
            return "busy"
        return self._write("PUT", self._edited(current, self.holder), "acquired")

    def release(self) -> Outcome:
        for _ in range(2):  # one re-read on a conflict
            status, current = self.call("GET", f"{self.collection}/{self.name}")
            if status != 200:
                raise PathError(status, str(current.get("message")))
            if (current.get("spec") or {}).get("holderIdentity") != self.holder:
                return "not_holder"
            if self._write("PUT", self._edited(current, ""), "released") == "released":
                return "released"
        return "busy"

    def count(self) -> int:
        selector = urllib.parse.quote("app=finalizer")
        status, body = self.call(
            "GET", f"/apis/batch/v1/namespaces/{self.namespace}/jobs?labelSelector={selector}"
        )
        if status != 200:
            raise PathError(status, str(body.get("message")))
        return client_count(list(body.get("items") or []))

    def create_job(self, body: Mapping[str, Any]) -> int:
        return self.call("POST", f"/apis/batch/v1/namespaces/{self.namespace}/jobs", body)[0]

    def close(self) -> None:
        self.http.clear()


KUBECTL_CODES: tuple[tuple[str, int], ...] = (
    ("(AlreadyExists)", 409), ("(Conflict)", 409), ("Operation cannot be fulfilled", 409),
    ("(Forbidden)", 403), ("(TooManyRequests)", 429), ("(ServiceUnavailable)", 503),
    ("(Invalid)", 422), ("(InternalError)", 500), ("(NotFound)", 404), ("(BadRequest)", 400),
)  # fmt: skip


def kubectl_code(result: subprocess.CompletedProcess[str]) -> int:
    """The HTTP status a kubectl run stands for: 200, or the one its error line names."""
    if result.returncode == 0:
        return 200
    for marker, code in KUBECTL_CODES:
        if marker in result.stderr:
            return code
    return 0


class OpenApiLease(LeasePath):
    """``kubectl`` get/create/replace, a fresh body on every write (the OpenAPI service)."""

    source = "openapi"

    def __init__(
        self,
        kubectl: Callable[..., subprocess.CompletedProcess[str]],
        namespace: str,
        ttl: int,
        skew: float,
    ) -> None:
        super().__init__(namespace, ttl, skew)
        self.kubectl = kubectl
        self.last_stderr = ""

    def _run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        result = self.kubectl("-n", self.namespace, *args, input=input)
        self.last_stderr = result.stderr
        return result

    def _fresh(self, holder: str, resource_version: str | None) -> dict[str, Any]:
        now = microtime(self.clock())
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": self.ttl,
                "acquireTime": now,
                "renewTime": now,
            },
        }

    def _get(self) -> dict[str, Any] | None:
        result = self._run("get", "lease", self.name, "--ignore-not-found", "-o", "json")
        if result.returncode != 0:
            raise PathError(kubectl_code(result), result.stderr)
        return json.loads(result.stdout) if result.stdout.strip() else None

    def _write(self, verb: str, body: dict[str, Any], success: Outcome) -> Outcome:
        result = self._run(verb, "-o", "json", "-f", "-", input=json.dumps(body))
        if result.returncode == 0:
            self.last_written = json.loads(result.stdout) if result.stdout.strip() else None
            return success
        if any(marker in result.stderr for marker in BUSY_MARKERS):
            return "busy"
        raise PathError(kubectl_code(result), result.stderr)

    def acquire(self) -> Outcome:
        current = self._get()
        if current is None:
            return self._write("create", self._fresh(self.holder, None), "acquired")
        rv = str(current["metadata"].get("resourceVersion") or "")
        holder = (current.get("spec") or {}).get("holderIdentity") or ""
        if holder == self.holder:
            return self._write("replace", self._fresh(self.holder, rv), "renewed")
        if holder and not expired(current, self.clock(), self.skew):
            return "busy"
        return self._write("replace", self._fresh(self.holder, rv), "acquired")

    def release(self) -> Outcome:
        for _ in range(2):
            current = self._get()
            if current is None or (current.get("spec") or {}).get("holderIdentity") != self.holder:
                return "not_holder"
            rv = str(current["metadata"].get("resourceVersion") or "")
            if self._write("replace", self._fresh("", rv), "released") == "released":
                return "released"
        return "busy"

    def count(self) -> int:
        result = self._run("get", "jobs", "-l", "app=finalizer", "-o", "json")
        if result.returncode != 0:
            raise PathError(kubectl_code(result), result.stderr)
        return client_count(list(json.loads(result.stdout).get("items") or []))

    def create_job(self, body: Mapping[str, Any]) -> int:
        # elastic-blast applies its Job manifests with kubectl.
        return kubectl_code(self._run("apply", "-f", "-", input=json.dumps(body)))
