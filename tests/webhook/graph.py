"""A namespace as search admission sees it: Jobs go in only when the policy admits them.

Runs the pure policy the way the handler does (reads_needed → survey →
lease_needed → decide) against the Jobs admitted so far, so a table can play a
whole ``elastic-blast submit`` and check what was left behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elbgate.capacity import NodeView
from elbgate.db_memory import DbMemoryTable
from elbgate.identities import SubmitterIdentities
from elbgate.settings import Settings
from tests.builders import NOW, SETTINGS, admission, lease, user
from webhook.decision import Decision
from webhook.node_rules import NodesSeen
from webhook.review import UserInfo
from webhook.search_admission import (
    JobRequest,
    Observed,
    Reads,
    decide,
    lease_needed,
    reads_needed,
    survey,
)

HOLDER = "dashboard-0b3f9a0e8a9d4f6c9f1e2d3c4b5a6978"
ALICE = user("alice")
ALICE_HOLDS = lease(HOLDER, holder_user="alice")


def labels_of(job: dict[str, Any]) -> dict[str, str]:
    return dict(job["metadata"].get("labels") or {})


@dataclass
class Namespace:
    """The unfinished Jobs of one gated namespace, and the policy's inputs."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    lease: dict[str, Any] | None = field(default_factory=lambda: ALICE_HOLDS)
    settings: Settings = SETTINGS
    nodes: tuple[NodeView, ...] | None = None
    """The Node watch cache (``None``: not synced)."""
    db_memory: dict[str, str] = field(default_factory=dict)
    """The operator's ConfigMap data (``db`` → memory)."""
    now: datetime = NOW
    identities: SubmitterIdentities | None = None
    """The submitter identities and split holders (``None``: none configured)."""
    decisions: list[tuple[str, Decision]] = field(default_factory=list)

    def judge(self, body: dict[str, Any], who: UserInfo = ALICE) -> Decision:
        """What the webhook answers to a CREATE of ``body``; admitted Jobs are kept."""
        job = JobRequest.from_admission(admission("CREATE", body, who=who))
        reads = reads_needed(job)
        seen = None
        if reads in (Reads.JOBS, Reads.JOBS_AND_LEASE):
            seen = survey(job, self.jobs, self.settings.gate, self.now)
        wants_lease = reads in (Reads.LEASE, Reads.JOBS_AND_LEASE) or (
            seen is not None and lease_needed(job, seen)
        )
        observed = Observed(
            seen,
            self.lease if wants_lease else None,
            nodes=NodesSeen(
                self.nodes,
                "" if self.nodes is not None else "the Node watch has not synced yet",
                DbMemoryTable.from_data(self.db_memory),
                table_source="ConfigMap elb-system/elb-gate-db-memory",
            ),
        )
        decision = decide(
            job, observed, self.settings.gate, self.settings.rules, self.now, self.identities
        )
        self.decisions.append((body["metadata"]["name"], decision))
        if decision.allowed:
            self.jobs.append(body)
        return decision

    def apply(self, bodies: list[dict[str, Any]], who: UserInfo = ALICE) -> list[Decision]:
        """``kubectl apply`` of several Jobs: each is its own request."""
        return [self.judge(body, who) for body in bodies]

    def finish(self, job_id: str) -> None:
        """Every Job of ``job_id`` completes (the LIST then no longer returns them)."""
        self.jobs = [j for j in self.jobs if labels_of(j).get("elb-job-id") != job_id]

    def finish_setup(self, job_id: str) -> None:
        """The setup Jobs of ``job_id`` complete: its database is staged. They stay in
        the LIST, as the Job controller leaves them (init Jobs carry no TTL)."""
        for job in self.jobs:
            if labels_of(job) == {"app": "setup", "elb-job-id": job_id}:
                job["status"] = {
                    "succeeded": 1,
                    "conditions": [
                        {"type": "SuccessCriteriaMet", "status": "True"},
                        {"type": "Complete", "status": "True"},
                    ],
                }

    def names(self) -> list[str]:
        return [j["metadata"]["name"] for j in self.jobs]
