"""The two existing submit paths' Lease clients, reproduced as they behave in production.

Neither knows elb-gate exists. Both speak the Lease protocol of the coordination
note (GET; create if absent; renew if own; compare-and-swap takeover if
expired; conditional release), judge expiry on their OWN clock with a 30 s
skew margin, and read "someone else has it" from the API's answer. Where they
differ is on the wire:

* :class:`OpenApiLeaseClient` — the in-cluster OpenAPI service
  (``docker-openapi/app/submit_coordination.py`` of elastic-blast-azure). It
  drives ``kubectl``: ``get lease <name> -n <ns> --ignore-not-found -o json``,
  ``create -f -``, ``replace -f -``. Every acquire, renew and takeover sends a
  FRESH body built from scratch (holder, duration, ``acquireTime`` and
  ``renewTime`` = now, the ``resourceVersion`` it read): whatever else the
  stored Lease carries — elb-gate's stamp annotations, ``leaseTransitions`` —
  is dropped. Its release sends a fresh body too, with the stored times.
  Busy = stderr says "AlreadyExists"/"already exists", "conflict" (any case)
  or "not found" (the Lease vanished under a replace).
* :class:`DashboardLeaseClient` — the web dashboard's Celery task. It speaks
  raw HTTPS with a bearer token: GET; POST to create; PUT of the object it read
  (annotations kept) with ``resourceVersion`` to renew, take over and release.
  It sets ``acquireTime`` = ``renewTime`` = now on every acquire AND every
  renew. Busy = HTTP 409.

Common to both: ``holderIdentity`` = ``<source>-<uuid4 hex>``; expired when
``now > renewTime + leaseDurationSeconds + skew`` (skew 30 s,
``BLAST_LEASE_CLOCK_SKEW_SECONDS``); a Lease with no ``renewTime`` is free, one
whose ``renewTime`` does not parse is held (never steal on bad data); a free
holder (``""``) may be taken at once; MicroTimes carry exactly six fractional
digits (the API server refuses any other count with 400).

:func:`split_fan_out` is the dashboard's storage-query split on top of its
Lease client (``_dispatch_split_child_submits`` with
``wait_for_k8s_admission(check_capacity=False)``): shards one after another; per
shard, attempts with a FRESH holder ``dashboard-split-<uuid4 hex>`` each (the holder
is minted inside every acquire attempt) every 5 s ±20 % until the Lease is taken or
the shard's deadline (min(300 s cap, what is left of a 1800 s budget for the whole
fan-out)) passes; Gate A only, no count of active searches; then one
``elastic-blast submit``, the Lease released in ``finally``. A shard whose wait times
out, whose Lease call errors or whose submit fails is marked ``submit_failed`` and
never dispatched again.

Nothing here imports elb-gate: a reproduction sharing elb-gate's code would
agree with elb-gate by construction, which is what these clients exist to test.
"""

from __future__ import annotations

import copy
import json
import os
import random
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal, Self

from testbed.controlplane import ControlPlane, PodIdentity, kubectl_path

Outcome = Literal["acquired", "renewed", "released", "busy", "not_holder", "skipped"]
"""What one call came to, as the client itself sees it. ``skipped``: a release
the OpenAPI client gave up on after an error (it logs and moves on)."""

TTL_SECONDS = 900
"""``BLAST_SUBMIT_LEASE_TTL_SECONDS`` default of both paths."""
SKEW_SECONDS = 30
"""``BLAST_LEASE_CLOCK_SKEW_SECONDS`` default of both paths."""
KUBECTL_TIMEOUT_SECONDS = 15.0
"""The OpenAPI service's deadline per kubectl call."""

JsonObj = dict[str, Any]
RELEASE_KEPT = ("leaseDurationSeconds", "acquireTime", "renewTime")
"""What a release built from scratch carries over from the stored Lease."""


CONFLICT = (
    "operation cannot be fulfilled",
    "please apply your changes to the latest version",
    "conflict",
)
"""What kubectl prints, in lower case, when a replace lost a compare-and-swap."""


class ClientError(RuntimeError):
    """An answer the client treats as an outage (fail-closed), not as busy."""


def lease_name(namespace: str) -> str:
    """``elb-blast-submit-<namespace>``, the name both paths agree on."""
    return f"elb-blast-submit-{namespace}"


def new_holder(source: str) -> str:
    """``<source>-<uuid4 hex>``: a fresh identity per acquisition, never truncated."""
    return f"{source}-{uuid.uuid4().hex}"


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime as both clients write it: six fractional digits, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


def parse_time(raw: Any) -> datetime | None:
    """RFC 3339 as Python reads it (``Z`` = ``+00:00``); ``None`` when it does not parse."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        parsed = datetime.fromisoformat(raw.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def is_expired(spec: Mapping[str, Any], now: datetime, skew: float, default_ttl: int) -> bool:
    """Both clients' expiry test, on the caller's clock: ``now > renewTime + ttl + skew``.
    No ``renewTime`` = never stamped = free; an unparseable one = still held."""
    raw = spec.get("renewTime")
    renewed = parse_time(raw)
    if renewed is None:
        return not (isinstance(raw, str) and raw.strip())
    try:
        ttl = int(spec.get("leaseDurationSeconds") or default_ttl)
    except (TypeError, ValueError):
        ttl = default_ttl
    return (now - renewed).total_seconds() > ttl + skew


class LeaseClient:
    """What both clients do the same way: the choices they make from the object they
    read, and the protocol's steps; each speaks its own wire (:meth:`read`,
    :meth:`write`, and the bodies it sends)."""

    source = ""

    def __init__(
        self,
        namespace: str,
        holder: str | None,
        *,
        ttl: int = TTL_SECONDS,
        skew: float = SKEW_SECONDS,
        clock_offset: float = 0.0,
    ) -> None:
        self.namespace = namespace
        self.name = lease_name(namespace)
        self.holder = holder or new_holder(self.source)
        self.ttl = ttl
        self.skew = skew
        self.clock_offset = clock_offset
        self.sent: list[JsonObj] = []
        """Every body written, in order (for tests that look at the wire)."""

    def now(self) -> datetime:
        """This client's wall clock: the host's, shifted by ``clock_offset`` seconds."""
        return datetime.now(UTC) + timedelta(seconds=self.clock_offset)

    def sees_expired(self, stored: Mapping[str, Any]) -> bool:
        """Whether this client, on its own clock, would take ``stored`` over."""
        spec = stored.get("spec") or {}
        return not spec.get("holderIdentity") or is_expired(spec, self.now(), self.skew, self.ttl)

    def fresh_body(self, holder: str, stored: Mapping[str, Any] | None = None) -> JsonObj:
        """A Lease built from scratch, as both clients create one; over ``stored``, with
        the ``resourceVersion`` read (the OpenAPI client's renew and takeover)."""
        stamp = micro_time(self.now())
        body: JsonObj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": self.ttl,
                "acquireTime": stamp,
                "renewTime": stamp,
            },
        }
        if stored is not None:
            version = (stored.get("metadata") or {}).get("resourceVersion")
            body["metadata"]["resourceVersion"] = str(version or "")
        return body

    def taken(self, stored: JsonObj, mine: bool) -> JsonObj:
        """The replace that takes (or, ``mine``, renews) ``stored``: as the OpenAPI
        client sends it, a fresh body (a renew resets ``acquireTime`` too)."""
        return self.fresh_body(self.holder, stored)

    def released(self, stored: JsonObj) -> JsonObj:
        """The replace that releases ``stored``: as the OpenAPI client sends it, a fresh
        body with holder ``""`` and the stored duration and times."""
        spec = stored.get("spec") or {}
        body = self.fresh_body("", stored)
        body["spec"].update({k: spec.get(k) for k in RELEASE_KEPT})
        return body

    # -- the protocol, the same steps on either wire --------------------------------------

    def read(self) -> JsonObj | None:
        """The stored Lease, or ``None`` when there is none."""
        raise NotImplementedError

    def write(self, body: JsonObj, *, create: bool = False) -> bool:
        """Send ``body`` (a create, else a replace): ``True`` when written, ``False`` when
        the answer means busy; anything else raises :class:`ClientError`."""
        raise NotImplementedError

    def acquire(self) -> Outcome:
        """One attempt: create, renew (own), take over (free or expired), or busy."""
        stored = self.read()
        if stored is None:
            return "acquired" if self.write(self.fresh_body(self.holder), create=True) else "busy"
        mine = (stored.get("spec") or {}).get("holderIdentity") == self.holder
        if not (mine or self.sees_expired(stored)) or not self.write(self.taken(stored, mine)):
            return "busy"
        return "renewed" if mine else "acquired"

    def release(self) -> Outcome:
        """Clear the holder if it is still ours (a replace with the ``resourceVersion``
        read); when that is busy, re-read once."""
        for _attempt in range(2):
            stored = self.read()
            if stored is None or (stored.get("spec") or {}).get("holderIdentity") != self.holder:
                return "not_holder"
            if self.write(self.released(stored)):
                return "released"
        return "busy"


class OpenApiLeaseClient(LeaseClient):
    """The OpenAPI service's client: ``kubectl`` with a kubeconfig, fresh bodies."""

    source = "openapi"

    def __init__(
        self,
        kubeconfig: str,
        namespace: str,
        holder: str | None = None,
        *,
        ttl: int = TTL_SECONDS,
        skew: float = SKEW_SECONDS,
        clock_offset: float = 0.0,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__(namespace, holder, ttl=ttl, skew=skew, clock_offset=clock_offset)
        self.kubeconfig = kubeconfig
        self.kubectl = str(kubectl_path())
        self.cache_dir = cache_dir
        self.last_stderr = ""

    @classmethod
    def on(
        cls, cp: ControlPlane, who: str | PodIdentity, namespace: str, **kwargs: Any
    ) -> OpenApiLeaseClient:
        """As token-file user ``who``, or as the ServiceAccount of a Pod identity."""
        config = who.kubeconfig if isinstance(who, PodIdentity) else cp.kubeconfig(who)
        kwargs.setdefault("cache_dir", str(cp.state_dir / "kubectl-cache"))
        return cls(config, namespace, **kwargs)

    # -- kubectl ------------------------------------------------------------------------

    def _run(self, *args: str, body: JsonObj | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        if self.cache_dir:
            env["KUBECACHEDIR"] = self.cache_dir
        if body is not None:
            self.sent.append(copy.deepcopy(body))
        try:
            result = subprocess.run(
                [self.kubectl, *args],
                input=json.dumps(body) if body is not None else None,
                capture_output=True,
                text=True,
                env=env,
                timeout=KUBECTL_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClientError(f"kubectl timed out: {' '.join(args)}") from exc
        self.last_stderr = result.stderr
        return result

    def get(self) -> JsonObj | None:
        """The stored Lease, or ``None`` (``--ignore-not-found`` prints nothing)."""
        result = self._run(
            "get", "lease", self.name, "-n", self.namespace, "--ignore-not-found", "-o", "json"
        )
        if result.returncode != 0:
            raise ClientError(f"lease GET failed ({result.returncode}): {result.stderr.strip()}")
        text = result.stdout.strip()
        if not text:
            return None
        try:
            return dict(json.loads(text))
        except ValueError as exc:
            raise ClientError(f"lease GET returned non-JSON: {exc}") from exc

    def read(self) -> JsonObj | None:
        return self.get()

    def write(self, body: JsonObj, *, create: bool = False) -> bool:
        """``kubectl create`` or ``replace``. Busy: AlreadyExists on a create; a conflict
        on a replace, or, under a takeover or renew, the Lease gone (under a release,
        that is an error like any other)."""
        verb = "create" if create else "replace"
        result = self._run(verb, "-f", "-", body=body)
        if result.returncode == 0:
            return True
        busy: tuple[str, ...] = ("alreadyexists", "already exists") if create else CONFLICT
        if not create and body["spec"]["holderIdentity"]:
            busy += ("notfound", "not found")
        if any(phrase in result.stderr.lower() for phrase in busy):
            return False
        raise ClientError(f"lease {'CREATE' if create else 'PUT'} failed: {result.stderr.strip()}")

    def release(self) -> Outcome:
        """Errors are logged and swallowed (``skipped``): the release is best effort."""
        try:
            return super().release()
        except ClientError:
            return "skipped"


class DashboardLeaseClient(LeaseClient):
    """The dashboard's client: raw HTTPS with a bearer token, PUT of what it read."""

    source = "dashboard"

    def __init__(
        self,
        server: str,
        ca_file: str,
        token: str,
        namespace: str,
        holder: str | None = None,
        *,
        ttl: int = TTL_SECONDS,
        skew: float = SKEW_SECONDS,
        clock_offset: float = 0.0,
    ) -> None:
        super().__init__(namespace, holder, ttl=ttl, skew=skew, clock_offset=clock_offset)
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = 30.0  # the dashboard's deadline per call
        self.context = ssl.create_default_context(cafile=ca_file)
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.last_status = 0
        self.last_answer: JsonObj = {}

    @classmethod
    def on(cls, cp: ControlPlane, user: str, namespace: str, **kwargs: Any) -> Self:
        """As token-file user ``user`` (the dashboard holds a kubeconfig token)."""
        return cls(cp.server, cp.ca_file, cp.token(user), namespace, **kwargs)

    def _call(self, method: str, path: str, body: JsonObj | None = None) -> tuple[int, JsonObj]:
        data = None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            self.sent.append(copy.deepcopy(body))
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.server + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=self.timeout) as r:
                status, raw = int(r.status), r.read()
        except urllib.error.HTTPError as err:
            status, raw = int(err.code), err.read()
        try:
            answer = dict(json.loads(raw or b"{}"))
        except ValueError:
            answer = {"message": raw.decode("utf-8", "replace")}
        self.last_status, self.last_answer = status, answer
        return status, answer

    def get(self) -> tuple[int, JsonObj]:
        """``GET`` the Lease: (status, body)."""
        return self._call("GET", f"{self.collection}/{self.name}")

    def read(self) -> JsonObj | None:
        status, stored = self.get()
        if status == 404:
            return None
        if status != 200:
            raise ClientError(f"lease GET: {status} {stored.get('message')}")
        return stored

    def write(self, body: JsonObj, *, create: bool = False) -> bool:
        """POST (create) or PUT with ``resourceVersion``; busy = 409."""
        path = self.collection if create else f"{self.collection}/{self.name}"
        status, answer = self._call("POST" if create else "PUT", path, body)
        if status == 409:
            return False
        if status not in (200, 201):
            raise ClientError(f"{status} {answer.get('reason')}: {answer.get('message')}")
        return True

    def taken(self, stored: JsonObj, mine: bool) -> JsonObj:
        """The PUT that takes (or, ``mine``, renews) ``stored``: the object read, with
        this holder and ``acquireTime`` = ``renewTime`` = now."""
        stamp = micro_time(self.now())
        body = copy.deepcopy(stored)
        body["spec"].update(holderIdentity=self.holder, acquireTime=stamp, renewTime=stamp)
        return body

    def released(self, stored: JsonObj) -> JsonObj:
        """The PUT that releases ``stored``: the object read, with holder ``""``."""
        body = copy.deepcopy(stored)
        body["spec"]["holderIdentity"] = ""
        return body


SPLIT_SOURCE = "dashboard-split"
"""The ``source`` the dashboard's split fan-out mints its holder identities from."""
SPLIT_RETRY_SECONDS = 5.0
"""``_GATE_RETRY_INTERVAL_SECONDS``: the split path's inline wait between attempts."""
SPLIT_CHILD_WAIT_SECONDS = 300.0
"""``BLAST_SPLIT_CHILD_GATE_WAIT_MAX_SECONDS`` default: one shard's wait for the Lease."""
SPLIT_PARENT_BUDGET_SECONDS = 1800.0
"""``BLAST_SPLIT_PARENT_GATE_BUDGET_SECONDS`` default: all shards' waits together."""


@dataclass
class ShardOutcome:
    """One shard as the dashboard records it: ``submitted`` or ``submit_failed``."""

    shard: int
    phase: Literal["submitted", "submit_failed"]
    error: str = ""
    holder: str = ""
    detail: str = ""


def split_fan_out(
    lease_client: Callable[[str], DashboardLeaseClient],
    shards: int,
    submit: Callable[[int, str], str],
) -> list[ShardOutcome]:
    """The dashboard's split fan-out over :class:`DashboardLeaseClient` (see the module
    docstring). ``lease_client(holder)``: a Lease client for a holder identity (the
    dashboard's credential, one namespace). ``submit(shard, holder)`` is one shard's
    ``elastic-blast submit`` run while the Lease is held: it returns ``""`` on success,
    else the error it printed (the dashboard reads only the exit code and the error
    text, and never retries)."""
    parent_deadline = time.time() + SPLIT_PARENT_BUDGET_SECONDS
    out: list[ShardOutcome] = []
    for shard in range(shards):
        now = time.time()
        failed = partial(ShardOutcome, shard, "submit_failed")
        if now >= parent_deadline:
            out.append(
                failed("blast_submit_gate_unavailable", detail="parent_gate_budget_exhausted")
            )
            continue
        try:
            client = _admit(lease_client, min(now + SPLIT_CHILD_WAIT_SECONDS, parent_deadline))
        except TimeoutError as exc:
            out.append(failed("blast_submit_gate_unavailable", detail=str(exc)))
            continue
        except ClientError as exc:
            out.append(failed("blast_submit_lease_api_error", detail=str(exc)))
            continue
        try:
            error = submit(shard, client.holder)
        finally:
            client.release()
        phase: Literal["submitted", "submit_failed"] = "submit_failed" if error else "submitted"
        out.append(ShardOutcome(shard, phase, error, client.holder))
    return out


def _admit(
    lease_client: Callable[[str], DashboardLeaseClient], deadline: float
) -> DashboardLeaseClient:
    """``wait_for_k8s_admission(check_capacity=False)``: Gate A only."""
    while True:
        if time.time() >= deadline:
            raise TimeoutError("split child gate wait exceeded deadline before acquire")
        client = lease_client(new_holder(SPLIT_SOURCE))
        if client.acquire() == "acquired":
            return client
        remaining = deadline - time.time()
        if remaining <= 0:
            raise TimeoutError("split child gate wait exceeded deadline: submit_slot_busy")
        time.sleep(min(SPLIT_RETRY_SECONDS * random.uniform(0.8, 1.2), remaining))
