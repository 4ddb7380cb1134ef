"""Histories recorded on the real control plane, checked for linearizability.

A history is one namespace's operations over one race schedule, each with the API
server's own times: every Job create's admission (call = ``requestReceivedTimestamp``,
return = ``stageTimestamp`` of its audit record, output = stored or refused, with the
answer), every Job delete and every submit Lease write (from the audit log, who the API
server authenticated and when), and every Job finishing (from a watch of the
namespace's Jobs: from the first status that decides its outcome to the final
condition). The checker (``lincheck/``, a porcupine model written from
docs/design.md) says whether some order of them, each between its call and its
return, is a run of the gates.

Like :mod:`testbed.reliability.oracle`, this imports nothing from elb-gate: what a
Job is (app, search, staged databases) and when it has finished are read here from the
Job as Kubernetes writes it.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.api import Api, JsonObj
from testbed.controlplane import REPO
from testbed.reliability.gate_a import LEASE_PREFIX, final_record, parse_time, request_fields
from testbed.reliability.oracle import DECIDED_CONDITIONS, FINAL_CONDITIONS
from testbed.watch import Watch

LINCHECK = REPO / "lincheck"
NEVER = 2**62
"""A return that never came (a finish whose final condition was not seen): the
operation may have taken effect at any time after its call (within an int64, as the
checker reads times)."""
MARGIN_NS = 1_000_000_000
"""Condition times are written in whole seconds on the Job controller's clock: a
finish may have begun up to a second before the time it names."""


def _ns(value: object) -> int:
    """An RFC 3339 time in ns since the epoch (0 when absent or unreadable)."""
    moment = parse_time(value)
    return 0 if moment is None else int(moment.timestamp() * 1e9)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def job_facts(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The Job as the model reads it: name, ``app``, ``elb-job-id``, the databases a
    setup Job stages (its containers' ``ELB_DB``), its creation time."""
    labels = _labels(obj)
    app = str(labels.get("app") or "")
    stages: list[str] = []
    if app == "setup":
        template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in template.get("containers") or []:
            for env in container.get("env") or []:
                if env.get("name") == "ELB_DB" and env.get("value"):
                    stages.append(str(env["value"]))
    return {
        "name": str((obj.get("metadata") or {}).get("name") or ""),
        "app": app,
        "id": str(labels.get("elb-job-id") or ""),
        "stages": sorted(set(stages)),
        "created_ns": _ns((obj.get("metadata") or {}).get("creationTimestamp")),
    }


def _true(obj: Mapping[str, Any]) -> dict[str, int]:
    """The Job's conditions with status True, each with its transition time (ns)."""
    out = {}
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("status") == "True":
            out[str(c.get("type"))] = _ns(c.get("lastTransitionTime"))
    return out


class JobWatch:
    """Every event of the given namespaces' Jobs, with the moment it arrived (ns)."""

    def __init__(self, api: Api, namespaces: Iterable[str]) -> None:
        self.events: dict[str, list[tuple[int, str, JsonObj]]] = {ns: [] for ns in namespaces}
        self._current: dict[str, dict[str, JsonObj]] = {ns: {} for ns in self.events}
        """Each namespace's Jobs as last seen (by name), those deleted left out."""
        self._lock = threading.Lock()
        self.gaps: list[str] = []
        """Each continuity the watch lost (410 Gone): the histories around one miss events."""
        self._since: dict[str, int] = {}
        self._watch = Watch(api, "jobs", self._on, self.gaps.append)

    def _on(self, kind: str, obj: JsonObj) -> None:
        ns = str((obj.get("metadata") or {}).get("namespace") or "")
        with self._lock:
            if ns in self.events:
                self.events[ns].append((time.time_ns(), kind, obj))
                name = str((obj.get("metadata") or {}).get("name"))
                if kind == "DELETED":
                    self._current[ns].pop(name, None)
                else:
                    self._current[ns][name] = obj

    def forget(self, namespace: str) -> None:
        """Start the namespace's next history."""
        with self._lock:
            self.events[namespace] = []
            self._current[namespace] = {}
            self._since[namespace] = len(self.gaps)

    def lost(self, namespace: str) -> list[str]:
        """The continuity the watch lost since the namespace's history began."""
        with self._lock:
            return self.gaps[self._since.get(namespace, 0) :]

    def start(self) -> JobWatch:
        self._watch.start()
        return self

    def stop(self) -> None:
        self._watch.stop()

    def events_of(self, namespace: str) -> list[tuple[int, str, JsonObj]]:
        """The namespace's events so far: (arrival, ns since the epoch; kind; object)."""
        with self._lock:
            return list(self.events[namespace])

    def jobs(self, namespace: str) -> list[JsonObj]:
        """The namespace's Jobs as last seen, those deleted left out."""
        with self._lock:
            return list(self._current[namespace].values())

    def finishes(self, namespace: str) -> list[dict[str, Any]]:
        """One finish per Job: from the first status deciding its outcome to the first
        final condition (``NEVER`` when none was seen)."""
        begun: dict[str, int] = {}
        ended: dict[str, int] = {}
        for seen, _kind, obj in self.events_of(namespace):
            name = str((obj.get("metadata") or {}).get("name") or "")
            true = _true(obj)
            decided = [v for k, v in true.items() if k in FINAL_CONDITIONS | DECIDED_CONDITIONS]
            status = obj.get("status") or {}
            needed = (obj.get("spec") or {}).get("completions") or 1
            done = (status.get("succeeded") or 0) >= needed and not status.get("terminating")
            if (decided or status.get("completionTime") or done) and name not in begun:
                begun[name] = min([seen, *(v for v in decided if v)]) - MARGIN_NS
            if true.keys() & FINAL_CONDITIONS and name not in ended:
                ended[name] = seen
        return [
            {"kind": "finish", "job": {"name": n}, "call": c, "return": ended.get(n, NEVER)}
            for n, c in begun.items()
        ]

    def outcomes(self, namespace: str) -> Counter[str]:
        """How each Job was last seen: ``<app>:Complete``/``Failed``, ``<app>:deleted``
        (before a final condition), ``<app>:unfinished``."""
        last: dict[str, tuple[str, JsonObj]] = {}
        final: dict[str, str] = {}
        for _seen, kind, obj in self.events_of(namespace):
            name = str((obj.get("metadata") or {}).get("name"))
            last[name] = (kind, obj)
            for condition in _true(obj).keys() & FINAL_CONDITIONS:
                final.setdefault(name, f"{_labels(obj).get('app') or '-'}:{condition}")
        out = Counter(final.values())
        for name, (kind, obj) in last.items():
            if name not in final:
                state = "deleted" if kind == "DELETED" else "unfinished"
                out[f"{_labels(obj).get('app') or '-'}:{state}"] += 1
        return out

    def stored(self, namespace: str) -> set[str]:
        """Names of the Jobs the watch saw stored."""
        return {
            str((o.get("metadata") or {}).get("name")) for _, _k, o in self.events_of(namespace)
        }


def audit_operations(
    events: Iterable[Mapping[str, Any]], namespace: str, stored: set[str]
) -> list[dict[str, Any]]:
    """The namespace's Job creates and deletes and submit Lease writes, from audit
    records at ``ResponseComplete``."""
    out: list[dict[str, Any]] = []
    for e in events:
        asked = request_fields(e) if final_record(e) else None
        if asked is None or asked["namespace"] != namespace:
            continue
        code = int((e.get("responseStatus") or {}).get("code") or 0)
        verb, resource = e.get("verb"), asked["resource"]
        call, ret = _ns(e.get("requestReceivedTimestamp")), _ns(e.get("stageTimestamp"))
        base = {"call": call, "return": ret, "user": asked["user"]}
        if resource == "jobs" and verb == "create":
            body = e.get("responseObject") if code == 201 else e.get("requestObject")
            if not isinstance(body, Mapping):
                continue
            facts = job_facts(body)
            admitted = code == 201 or (code == 504 and facts["name"] in stored)
            facts["created_ns"] = facts["created_ns"] or ret
            message = str((e.get("responseStatus") or {}).get("message") or "")
            out.append(
                {
                    **base,
                    "kind": "create",
                    "job": facts,
                    "_output": {"admitted": admitted, "answer": f"{code} {message[:160]}"},
                }
            )
        elif resource == "jobs" and verb == "delete" and code in (200, 202):
            out.append({**base, "kind": "delete", "job": {"name": asked["name"]}})
        elif (
            resource == "leases"
            and verb in ("create", "update", "patch")
            and asked["name"].startswith(LEASE_PREFIX)
            and code in (200, 201)
            and isinstance(e.get("responseObject"), Mapping)
        ):
            spec = e["responseObject"].get("spec") or {}
            duration = int(spec.get("leaseDurationSeconds") or 0)
            out.append(
                {
                    **base,
                    "kind": "lease",
                    "holder": str(spec.get("holderIdentity") or ""),
                    "duration_ns": duration * 1_000_000_000,
                }
            )
    return out


@dataclass
class History:
    """One recorded history, ready for the checker."""

    name: str
    kind: str
    settings: Mapping[str, Any]
    namespace: str = ""
    audit_offset: int = 0
    fault: str = "none"
    """The fault put on the webhooks' API calls in its namespace."""
    fault_fired: int = 0
    """How many of their requests it hit."""
    operations: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    """How its Jobs ended, as the watch saw them."""
    split: bool = False
    """Two Job creates that overlapped in time were judged by different replicas."""
    paired: bool = False
    """The router sent the race's first two Job creates to the two replicas together."""

    def counts(self) -> dict[str, int]:
        creates = [o for o in self.operations if o["kind"] == "create"]
        return {
            "operations": len(self.operations),
            "creates": len(creates),
            "admitted": sum(o["_output"]["admitted"] for o in creates),
            "refused": sum(not o["_output"]["admitted"] for o in creates),
            "finishes": sum(o["kind"] == "finish" for o in self.operations),
            "deletes": sum(o["kind"] == "delete" for o in self.operations),
            "lease_writes": sum(o["kind"] == "lease" for o in self.operations),
        }

    def to_json(self) -> str:
        ops = []
        for client, o in enumerate(self.operations):
            inp = {k: v for k, v in o.items() if k != "_output"}
            ops.append({"client": client, "input": inp, "output": o.get("_output", {})})
        return json.dumps(
            {"name": self.name, "kind": self.kind, "settings": self.settings, "operations": ops}
        )


@dataclass(frozen=True)
class Verdict:
    name: str
    result: str
    """``Ok``, ``Illegal`` (a violation) or ``Unknown`` (the checker timed out)."""
    why: tuple[str, ...]


@functools.cache
def checker() -> Path:
    """The checker binary, built once per process and removed when it exits (its module
    is pinned by go.sum; the Go module proxy fills the module cache the first time)."""
    directory = tempfile.mkdtemp(prefix="elb-lincheck-")
    atexit.register(shutil.rmtree, directory, True)
    binary = Path(directory) / "lincheck"
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}
    subprocess.run(
        ["go", "build", "-o", str(binary), "."], cwd=LINCHECK, env=env, check=True, timeout=600
    )
    return binary


def check(histories: Sequence[History]) -> list[Verdict]:
    """Run the checker over ``histories``, each given at most a minute."""
    if not histories:
        return []
    stdin = "".join(h.to_json() + "\n" for h in histories)
    done = subprocess.run(
        [str(checker()), "-timeout=60s"],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60 * len(histories) + 120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"lincheck exited {done.returncode}: {done.stderr.strip()}")
    found = [json.loads(line) for line in done.stdout.splitlines()]
    return [Verdict(v["name"], v["result"], tuple(v.get("why") or ())) for v in found]
