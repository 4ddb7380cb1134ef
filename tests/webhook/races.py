"""Two first Jobs sent at the same moment by one Lease holder, on the real control plane.

Each round gets a namespace of its own: ``seed`` searches already running (created
before the namespace is gated, as under an install), the Lease held by alice, then two
threads released by one barrier each create one Job as alice through the API server.
The API server calls the registered webhook (one process, or two replicas behind one
Service) for both at once; what it answered and what the namespace then holds is the
round's outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from testbed import elastic_blast as elb
from testbed.api import ApiError, JsonObj
from testbed.clients import OpenApiLeaseClient
from testbed.controlplane import ControlPlane
from testbed.waiting import at_once

HOLDER = "openapi-7d2e1f0a9b8c4d3e8f7a6b5c4d3e2f10"
SEARCH_APPS = ("setup", "submit", "blast", "finalizer")


@dataclass(frozen=True)
class Sent:
    """One racing create: admitted, or the API server's refusal (code, message)."""

    name: str
    code: int
    message: str

    @property
    def admitted(self) -> bool:
        return self.code == 201


@dataclass(frozen=True)
class Round:
    namespace: str
    sent: tuple[Sent, ...]
    active_ids: frozenset[str]
    """Distinct ``elb-job-id`` of the unfinished search Jobs the API server holds after."""
    unfinished_stagers: frozenset[str]
    """Names of the unfinished setup Jobs after the round."""

    @property
    def admitted(self) -> list[str]:
        return [s.name for s in self.sent if s.admitted]

    def describe(self) -> str:
        answers = "; ".join(f"{s.name}: {s.code} {s.message[:160]}" for s in self.sent)
        return f"{self.namespace}: {len(self.active_ids)} active ids; {answers}"


def send_at_once(api_for: Callable[[], Any], bodies: Sequence[JsonObj]) -> tuple[Sent, ...]:
    """Create every body at once (:func:`~testbed.waiting.at_once`), each with its own
    client, made before the race."""

    def sender(body: JsonObj) -> Callable[[], Sent]:
        api, name = api_for(), body["metadata"]["name"]

        def send() -> Sent:
            try:
                api.create(body)
                return Sent(name, 201, "")
            except ApiError as exc:
                message = exc.body.get("message", "") if isinstance(exc.body, dict) else exc.body
                return Sent(name, exc.status, str(message))

        return send

    out = at_once([sender(body) for body in bodies])
    assert all(isinstance(s, Sent) for s in out), f"a racing create did not return: {out}"
    return tuple(s for s in out if isinstance(s, Sent))


def unfinished_search_jobs(cp: ControlPlane, namespace: str) -> list[JsonObj]:
    jobs = cp.admin.list("jobs", namespace, label_selector=f"app in ({','.join(SEARCH_APPS)})")
    return [j for j in jobs if not (j.get("status") or {}).get("succeeded")]


def play_round(
    cp: ControlPlane,
    gate: Callable[[str], str],
    bodies: Callable[[str], list[JsonObj]],
    *,
    seed: int,
    before_race: Callable[[str], None] = lambda _namespace: None,
) -> Round:
    """One round in a fresh namespace: ``seed`` running searches, alice holds the Lease,
    ``bodies(namespace)`` created at once as alice (after ``before_race(namespace)``)."""
    namespace = cp.new_namespace("race")
    for _ in range(seed):
        cp.admin.create(elb.ready(elb.blast_batch(elb.search_id(), 0), namespace))
    gate(namespace)
    assert OpenApiLeaseClient.on(cp, "alice", namespace, holder=HOLDER).acquire() == "acquired"
    before_race(namespace)
    sent = send_at_once(lambda: cp.api("alice"), bodies(namespace))
    jobs = unfinished_search_jobs(cp, namespace)
    ids = frozenset(
        str(j["metadata"]["labels"]["elb-job-id"])
        for j in jobs
        if j["metadata"].get("labels", {}).get("elb-job-id")
    )
    stagers = frozenset(
        str(j["metadata"]["name"]) for j in jobs if j["metadata"]["labels"].get("app") == "setup"
    )
    return Round(namespace, sent, ids, stagers)


def two_first_jobs(namespace: str) -> list[JsonObj]:
    """The first Jobs of two new searches (cloud job submission: ``submit-jobs-<id8>``)."""
    return [
        elb.for_api(elb.submit_jobs(elb.search_id()), namespace),
        elb.for_api(elb.submit_jobs(elb.search_id()), namespace),
    ]


def two_stagings_of_one_database(namespace: str) -> list[JsonObj]:
    """Two new searches' first ``init-ssd`` Jobs, both staging ``core_nt`` onto node 0."""
    return [
        elb.for_api(elb.init_ssd(elb.search_id(), 0, "core_nt"), namespace),
        elb.for_api(elb.init_ssd(elb.search_id(), 0, "core_nt"), namespace),
    ]
