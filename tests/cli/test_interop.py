"""`elb-gate` shares one Lease, with one meaning of busy, with the existing submit
paths: a raw-HTTP client (GET / POST / PUT with resourceVersion, 409 = busy) and a
kubectl client (get --ignore-not-found / create -f - / replace -f -, busy on
"AlreadyExists" or "Operation cannot be fulfilled")."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from elbgate.cli import exit_codes
from tests.cli.conftest import LEASE, NS, Cli, holder_of, wait_until
from tests.kube_emulator import Emulator
from tests.kube_emulator.fixtures import kubectl

FAST = ("--poll-interval", "0.1")
TTL = 15
SKEW = 1


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def live(spec: dict[str, Any]) -> bool:
    if not spec.get("holderIdentity"):
        return False
    renewed = datetime.strptime(spec["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    ttl = spec.get("leaseDurationSeconds") or TTL
    return datetime.now(UTC) < renewed + timedelta(seconds=ttl + SKEW)


class RawHttpClient:
    """The raw-HTTP submit path, as it is written today (urllib, no elb-gate code)."""

    def __init__(self, emu: Emulator, user: str) -> None:
        self.base = f"{emu.url}/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
        self.token = emu.token(user)
        self.ctx = ssl.create_default_context(cafile=emu.ca_file)
        self.holder = f"dashboard-{uuid.uuid4().hex}"

    def _call(self, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
            return json.loads(resp.read())

    def acquire(self) -> bool:
        now = stamp(datetime.now(UTC))
        try:
            current = self._call("GET", f"{self.base}/{LEASE}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": LEASE},
                "spec": {
                    "holderIdentity": self.holder,
                    "leaseDurationSeconds": TTL,
                    "acquireTime": now,
                    "renewTime": now,
                },
            }
            return self._write("POST", self.base, body)
        if live(current["spec"]) and current["spec"]["holderIdentity"] != self.holder:
            return False
        current["spec"].update(
            holderIdentity=self.holder, leaseDurationSeconds=TTL, acquireTime=now, renewTime=now
        )
        return self._write("PUT", f"{self.base}/{LEASE}", current)

    def release(self) -> None:
        current = self._call("GET", f"{self.base}/{LEASE}")
        if current["spec"].get("holderIdentity") == self.holder:
            current["spec"]["holderIdentity"] = ""
            self._write("PUT", f"{self.base}/{LEASE}", current)

    def _write(self, method: str, url: str, body: dict[str, Any]) -> bool:
        try:
            self._call(method, url, body)
            return True
        except urllib.error.HTTPError as exc:
            if exc.code == 409:
                return False
            raise


class KubectlClient:
    """The kubectl-based submit path, as it is written today."""

    def __init__(self, emu: Emulator, user: str) -> None:
        self.emu, self.user = emu, user
        self.holder = f"openapi-{uuid.uuid4().hex}"
        self.seen: dict[str, Any] | None = None

    def read(self) -> dict[str, Any] | None:
        got = kubectl(self.emu, self.user, "get", "lease", LEASE, "-n", NS,
                      "--ignore-not-found", "-o", "json")  # fmt: skip
        assert got.returncode == 0, got.stderr
        self.seen = json.loads(got.stdout) if got.stdout.strip() else None
        return self.seen

    def acquire(self) -> bool:
        return self.write_after(self.read())

    def write_after(self, current: dict[str, Any] | None) -> bool:
        """Claim the Lease as last read (a CAS on that read's resourceVersion)."""
        now = stamp(datetime.now(UTC))
        spec = {"holderIdentity": self.holder, "leaseDurationSeconds": TTL,
                "acquireTime": now, "renewTime": now}  # fmt: skip
        if current is None:
            obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": LEASE, "namespace": NS}, "spec": spec}  # fmt: skip
            verb = "create"
        else:
            if live(current["spec"]) and current["spec"]["holderIdentity"] != self.holder:
                return False
            obj = current
            obj["spec"].update(spec)
            verb = "replace"
        done = kubectl(self.emu, self.user, verb, "-f", "-", input=json.dumps(obj))
        if done.returncode == 0:
            return True
        if "AlreadyExists" in done.stderr or "Operation cannot be fulfilled" in done.stderr:
            return False
        raise AssertionError(f"kubectl {verb} failed unexpectedly: {done.stderr}")

    def release(self) -> None:
        current = self.read()
        assert current is not None and current["spec"]["holderIdentity"] == self.holder
        current["spec"]["holderIdentity"] = ""
        done = kubectl(self.emu, self.user, "replace", "-f", "-", input=json.dumps(current))
        assert done.returncode == 0, done.stderr


def test_a_lease_held_by_the_raw_http_client_makes_elb_gate_busy_not_failed(
    cli: Cli, emulator: Emulator
) -> None:
    raw = RawHttpClient(emulator, "alice")
    assert raw.acquire()
    run = cli.run("submit", *FAST, "--", *cli.recorder("x"), BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS="0")
    assert run.code == exit_codes.SUBMIT_SLOT_TIMEOUT, run.stderr
    assert raw.holder in run.stderr
    raw.release()
    run = cli.run("submit", *FAST, "--", *cli.recorder("y"))
    assert run.code == 0, run.stderr
    assert raw.acquire(), "the raw client takes the Lease elb-gate released"


@pytest.mark.kubectl
def test_a_lease_held_by_the_kubectl_client_makes_elb_gate_busy_not_failed(
    cli: Cli, emulator: Emulator
) -> None:
    kc = KubectlClient(emulator, "alice")
    assert kc.acquire()
    run = cli.run("submit", *FAST, "--", *cli.recorder("x"), BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS="0")
    assert run.code == exit_codes.SUBMIT_SLOT_TIMEOUT, run.stderr
    assert kc.holder in run.stderr
    kc.release()
    assert holder_of(emulator) == ""


@pytest.mark.kubectl
def test_while_elb_gate_runs_both_existing_clients_see_busy_and_win_after_it(
    cli: Cli, emulator: Emulator
) -> None:
    raw, kc = RawHttpClient(emulator, "alice"), KubectlClient(emulator, "alice")
    assert raw.acquire()
    raw.release()
    before_cli = kc.read()  # the kubectl client read the free Lease before elb-gate took it
    assert before_cli is not None
    run = cli.start("submit", *FAST, "--", *cli.recorder("x", go="go"))
    wait_until(lambda: len(cli.log_lines()) == 1, "COMMAND to start")
    cli_holder = holder_of(emulator)
    assert cli_holder.startswith("cli-")
    assert not raw.acquire(), "raw client: elb-gate's Lease is live, so busy"
    assert not kc.acquire(), "kubectl client: elb-gate's Lease is live, so busy"
    # Writes based on reads that predate elb-gate's are refused, and read as busy:
    assert not kc.write_after(before_cli), "stale replace: Operation cannot be fulfilled"
    assert not kc.write_after(None), "create of an existing Lease: AlreadyExists"
    assert holder_of(emulator) == cli_holder
    cli.release_go("go")
    assert run.wait() == 0, run.stderr
    assert holder_of(emulator) == ""
    assert kc.acquire() and holder_of(emulator) == kc.holder
    kc.release()
    assert raw.acquire() and holder_of(emulator) == raw.holder
