"""The two existing submit paths' Lease clients, reproduced as they behave today.

Neither knows elb-gate exists. Both judge expiry on their own clock, and both
read "someone else has it" from the API's answer:

* :class:`RawHttpLeaseClient` (the in-cluster OpenAPI service): GET; POST to
  create; PUT with ``resourceVersion`` to renew, take over and release, built
  from scratch (so annotations are dropped); 409 = busy.
* :class:`KubectlLeaseClient` (the dashboard's Celery task):
  ``kubectl get lease --ignore-not-found -o json``, ``kubectl create -f -``,
  ``kubectl replace -f -``; busy when stderr says "already exists",
  "Operation cannot be fulfilled" or "Conflict".
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from elbgate.lease import LeaseView, format_microtime, is_expired
from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl

Outcome = Literal["acquired", "renewed", "released", "busy", "not_holder"]
DURATION = 900


class ClientError(RuntimeError):
    """An answer the client protocol treats as an outage, not as busy."""


class _Protocol:
    """The decisions both clients make the same way, on the client's own clock."""

    def __init__(self, namespace: str, holder: str, clock_offset: float = 0.0) -> None:
        self.namespace = namespace
        self.name = f"elb-blast-submit-{namespace}"
        self.holder = holder
        self.clock_offset = clock_offset

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.clock_offset)

    def fresh(self) -> dict[str, Any]:
        stamp = format_microtime(self.now())
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.holder,
                "leaseDurationSeconds": DURATION,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }

    def free_for_me(self, stored: dict[str, Any]) -> bool:
        view = LeaseView.from_dict(stored)
        return (
            not view.held or view.holder == self.holder or is_expired(view, self.now(), 0, DURATION)
        )


class RawHttpLeaseClient(_Protocol):
    """GET / POST / PUT-with-resourceVersion over HTTPS with a bearer token."""

    def __init__(
        self, emu: Emulator, user: str, namespace: str, holder: str, clock_offset: float = 0.0
    ) -> None:
        super().__init__(namespace, holder, clock_offset)
        self.base = emu.url
        self.token = emu.token(user)
        self.ctx = ssl.create_default_context(cafile=emu.ca_file)
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def get(self) -> tuple[int, dict[str, Any]]:
        return self._call("GET", f"{self.collection}/{self.name}")

    def acquire(self) -> Outcome:
        status, stored = self.get()
        if status == 404:
            status, body = self._call("POST", self.collection, self.fresh())
            return self._judge(status, body, "acquired")
        if status != 200:
            raise ClientError(f"GET: {status} {stored}")
        if not self.free_for_me(stored):
            return "busy"
        mine = LeaseView.from_dict(stored).holder == self.holder
        return self.put(stored, self.holder, "renewed" if mine else "acquired")

    def release(self) -> Outcome:
        status, stored = self.get()
        if status != 200:
            raise ClientError(f"GET: {status} {stored}")
        if LeaseView.from_dict(stored).holder != self.holder:
            return "not_holder"
        return self.put(stored, "", "released")

    def put(self, stored: dict[str, Any], holder: str, success: Outcome) -> Outcome:
        """A full-object PUT built from scratch: no annotations, this client's clock."""
        body = self.fresh()
        body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        body["spec"]["holderIdentity"] = holder
        if success == "renewed":
            body["spec"]["acquireTime"] = stored["spec"].get("acquireTime")
        status, answer = self._call("PUT", f"{self.collection}/{self.name}", body)
        return self._judge(status, answer, success)

    @staticmethod
    def _judge(status: int, body: dict[str, Any], success: Outcome) -> Outcome:
        if status in (200, 201):
            return success
        if status == 409:
            return "busy"
        raise ClientError(f"{status} {body.get('reason')}: {body.get('message')}")


class KubectlLeaseClient(_Protocol):
    """``kubectl get/create/replace -o json`` as one user."""

    def __init__(
        self, emu: Emulator, user: str, namespace: str, holder: str, clock_offset: float = 0.0
    ) -> None:
        super().__init__(namespace, holder, clock_offset)
        self.emu = emu
        self.user = user
        self.last_stderr = ""

    def _kubectl(self, *args: str, input: str | None = None) -> Any:
        result = kubectl(self.emu, self.user, "-n", self.namespace, *args, input=input)
        self.last_stderr = result.stderr
        return result

    def get(self) -> dict[str, Any] | None:
        result = self._kubectl("get", "lease", self.name, "--ignore-not-found", "-o", "json")
        if result.returncode != 0:
            raise ClientError(result.stderr)
        return json.loads(result.stdout) if result.stdout.strip() else None

    def acquire(self) -> Outcome:
        stored = self.get()
        if stored is None:
            result = self._kubectl("create", "-f", "-", input=json.dumps(self.fresh()))
            return self._judge(result, "acquired")
        if not self.free_for_me(stored):
            return "busy"
        mine = LeaseView.from_dict(stored).holder == self.holder
        return self.replace(stored, self.holder, "renewed" if mine else "acquired")

    def release(self) -> Outcome:
        stored = self.get()
        if stored is None or LeaseView.from_dict(stored).holder != self.holder:
            return "not_holder"
        return self.replace(stored, "", "released")

    def replace(self, stored: dict[str, Any], holder: str, success: Outcome) -> Outcome:
        """Edit what ``get`` returned (annotations kept) and ``kubectl replace`` it."""
        stamp = format_microtime(self.now())
        stored["spec"]["holderIdentity"] = holder
        stored["spec"]["renewTime"] = stamp
        if success == "acquired":
            stored["spec"]["acquireTime"] = stamp
        result = self._kubectl("replace", "-f", "-", input=json.dumps(stored))
        return self._judge(result, success)

    @staticmethod
    def _judge(result: Any, success: Outcome) -> Outcome:
        if result.returncode == 0:
            return success
        busy = ("already exists", "Operation cannot be fulfilled", "Conflict")
        if any(marker in result.stderr for marker in busy):
            return "busy"
        raise ClientError(result.stderr)
