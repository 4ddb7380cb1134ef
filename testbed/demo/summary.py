"""The closing summary: what happened, in numbers, and whether every expectation held."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from elbgate.settings import Settings
from testbed.demo.scenario import Report
from testbed.holders import TARGET_SECONDS as RECLAIM_TARGET_SECONDS

GATE_OF_REASON = {
    "no_lease": "Gate A",
    "not_holder": "Gate A",
    "lease_expired": "Gate A",
    "ceiling": "Gate B",
    "unverified": "fail-closed",
    "missing_job_id": "Job shape",
}


@dataclass(frozen=True, slots=True)
class Check:
    """One expectation of ``--once``."""

    what: str
    ok: bool
    detail: str


def admission_counts(metrics_text: str) -> Counter[tuple[str, str, str]]:
    """``(webhook, decision, reason) -> reviews`` from one replica's /metrics text."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "elb_gate_admission_requests_total":
                labels = sample.labels
                key = (labels["webhook"], labels["decision"], labels["reason"])
                counts[key] += int(sample.value)
    return counts


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def summarize(
    report: Report, metrics: dict[str, str], settings: Settings, setup_seconds: float
) -> tuple[list[str], list[Check]]:
    """The summary lines and the checks behind ``--once``'s exit status.
    ``metrics`` holds each webhook replica's final /metrics text, by pod name."""
    seen = report.seen
    ceiling = settings.gate.max_run_concurrency
    lines: list[str] = []

    ran = [o for o in report.burst if o.exit_code == 0 and o.job_id in seen.finished]
    by_path = Counter(o.path for o in ran)
    of_path = Counter(o.path for o in report.burst)
    paths = ", ".join(f"{p} {by_path[p]}/{of_path[p]}" for p in sorted(of_path))
    lines.append(
        f"searches run:         {len(ran)} of {len(report.burst)} ({paths}); "
        f"the Lease changed hands {seen.lease_handovers} times"
    )
    lines.append(
        f"peak concurrency:     {seen.peak} (ceiling {ceiling}), elbgate.census on the "
        f"Jobs after each of {seen.job_events} Job events"
    )
    lines.append(
        f"in-cluster batch:     {report.batch_jobs_created} app=blast Jobs created by the "
        "submit-jobs pods (service account default, no Lease), admitted as part of "
        "their active search"
    )

    per_replica = {name: admission_counts(text) for name, text in metrics.items()}
    denials: Counter[str] = Counter()  # the Lease guard's denials are its own
    for (webhook, decision, reason), n in sum(per_replica.values(), Counter()).items():
        if decision == "denied" and n:
            search = webhook.startswith("search-admission")
            gate = GATE_OF_REASON.get(reason, "Lease guard") if search else "Lease guard"
            denials[f"{reason} ({gate})"] += n
    shown = ", ".join(f"{reason}={n}" for reason, n in sorted(denials.items())) or "none"
    lines.append(f"denials by reason:    {shown}")
    waits_lease = sum(o.lease_waits for o in report.burst)
    waits_full = sum(o.capacity_waits for o in report.burst)
    lines.append(
        f"waiting:              submitters found the Lease busy {waits_lease} times and "
        f"the namespace full {waits_full} times (waits, not errors)"
    )

    rogue = report.rogue
    lines.append(
        f"non-compliant:        exit {rogue.exit_code}, denied at its first Job; "
        f"Jobs left with its elb-job-id: {report.rogue_jobs_left}"
    )

    reclaim = next((r for r in seen.reclaims if report.doomed_holder in r.message), None)
    latency = None
    if reclaim is not None and report.pod_deleted_at is not None:
        latency = reclaim.at - report.pod_deleted_at
        still = "still Terminating" if report.pod_terminating_at_reclaim else "already gone"
        lines.append(
            f"dead-holder reclaim:  {latency:.1f} s after its pod was deleted (its pod "
            f"{still}; {reclaim.reason}, default settings: target "
            f"<= {RECLAIM_TARGET_SECONDS:g} s; waiting for expiry would have taken "
            f"{settings.gate.lease_ttl_seconds + settings.gate.clock_skew_seconds} s)"
        )
    else:
        lines.append("dead-holder reclaim:  not seen")

    orphan_name = report.orphan_name
    created = seen.created.get(orphan_name)
    flagged = seen.orphans_flagged.get(orphan_name)
    by_controller = orphan_name in seen.controller_deleted
    if created is not None and flagged is not None:
        lines.append(
            f"orphaned finalizer:   flagged {flagged - created:.1f} s after its creation "
            f"({settings.gate.finalizer_grace_seconds} s finalizer grace), Warning Event; "
            f"policy {settings.controller.orphan_policy}: "
            f"{'deleted by the controller' if by_controller else 'left for an operator'}, "
            f"who deleted it at {_seconds(report.operator_deleted_at)}"
        )
    else:
        lines.append(
            f"orphaned finalizer:   created {_seconds(created)}, flagged {_seconds(flagged)}"
        )

    served = {name: sum(c.values()) for name, c in per_replica.items()}
    lines.append(
        "webhook replicas:     "
        + ", ".join(f"{name} answered {n} reviews" for name, n in served.items())
    )
    changes = " -> ".join(f"{'in use' if u else 'idle'} at {t:.1f} s" for t, u in seen.liveness)
    lines.append(f"liveness:             {changes or 'no ConfigMap seen'}")
    story = report.finished_at - report.started_at
    lines.append(f"timings:              set-up {setup_seconds:.1f} s, story {story:.1f} s")

    checks = [
        Check(
            "all 10 searches ran",
            len(ran) == len(report.burst) == 10,
            f"{len(ran)} of {len(report.burst)} submitted and finished",
        ),
        Check(
            "peak concurrency within the ceiling",
            0 < seen.peak <= ceiling and not report.errors,
            f"peak {seen.peak}, ceiling {ceiling}, errors {report.errors[:3]}",
        ),
        Check(
            "the non-compliant submitter was denied and left nothing",
            rogue.exit_code not in (None, 0)
            and "Gate A" in rogue.output
            and report.rogue_jobs_left == 0
            and rogue.job_id not in seen.opened,
            f"exit {rogue.exit_code}, Jobs left {report.rogue_jobs_left}",
        ),
        Check(
            "the dead holder was reclaimed by the controller within 15 s",
            reclaim is not None
            and reclaim.reason == "dead_holder"
            and latency is not None
            and latency <= RECLAIM_TARGET_SECONDS,
            reclaim.message if reclaim is not None else "no reclaim of its Lease seen",
        ),
        Check(
            "the orphaned finalizer was flagged and left to an operator",
            flagged is not None and not by_controller,
            f"{orphan_name}: flagged at {_seconds(flagged)}, deleted by the controller "
            f"{by_controller}",
        ),
        Check(
            "liveness ended idle",
            seen.in_use is False and any(u for _, u in seen.liveness),
            changes or "no liveness ConfigMap seen",
        ),
        Check(
            "both webhook replicas answered",
            len(served) == 2 and all(n > 0 for n in served.values()),
            ", ".join(f"{name}: {n}" for name, n in served.items()),
        ),
    ]
    return lines, checks
