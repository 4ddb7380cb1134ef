"""Randomized schedules: what N submitters of mixed paths will do in one namespace.

A schedule is drawn from its seed alone: how many submitters (2..12), which path each
one speaks, which identity it has, its delays, its search's Jobs and how each Job ends,
who dies where and how, who misbehaves, and who stalls. The same seed is the same
schedule on every machine, so a schedule that shows a bug can be run again by its number.

A stall: a library submitter that does not die stops renewing the Lease it just took
(a process paused, a heartbeat starved), then wakes and must be refused. When the
schedule has a dashboard submitter that does not die, that one takes the expired hold
over; otherwise the staller goes last and the controller clears the hold at expiry.
Every schedule with a library submitter that does not die has one stall (drawn from a
generator of its own, so adding stalls changed no other draw of a seed).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

from testbed.reliability.jobs import SHAPES, plan_search
from testbed.reliability.submitters import POD_DEATHS, CrashPoint, Death, Protocol, SubmitPlan

PROTOCOL_WEIGHTS: dict[Protocol, float] = {
    "client": 0.35,
    "dashboard": 0.3,
    "openapi": 0.2,
    "cli": 0.15,
}
MAX_PER_PROTOCOL: dict[Protocol, int] = {"client": 12, "dashboard": 12, "openapi": 3, "cli": 1}
"""kubectl and the CLI spawn a process per step and hold the Lease for seconds: capped
so a schedule fits the CI budget (each still appears in most schedules' mix)."""
DEATHS: dict[Protocol, tuple[Death, ...]] = {
    "client": (*POD_DEATHS, "thread_died", "process_died"),
    "cli": (*POD_DEATHS, "thread_died", "process_died"),
    "openapi": (*POD_DEATHS, "thread_died"),
    "dashboard": ("process_died",),
}
"""How each path can die: the dashboard runs outside the cluster (no Pod to watch),
the OpenAPI service inside it (a Pod's token); the CLI and the library either."""
CRASH_POINTS: tuple[CrashPoint, ...] = ("after_acquire", "mid_jobs", "after_jobs")
CRASH_PROBABILITY = 0.15
MAX_CRASHES = 2
"""A death without a pod stamp stalls the namespace for a TTL: at most two per schedule."""
POD_IDENTITY_PROBABILITY = 0.3
"""For the library and the CLI when they do not die in a way that needs a Pod."""


def draw(seed: int) -> tuple[SubmitPlan, ...]:
    """Everything random about one schedule, fixed by its seed: its submitters' plans."""
    rng = random.Random(seed)
    # 2..12, smaller sizes more often (mean ~5): every size occurs, CI stays in budget.
    n = round(rng.triangular(2, 12, 2))
    counts: Counter[Protocol] = Counter()
    plans = []
    crashes = 0
    for i in range(n):
        choices = [p for p in PROTOCOL_WEIGHTS if counts[p] < MAX_PER_PROTOCOL[p]]
        protocol = rng.choices(choices, [PROTOCOL_WEIGHTS[p] for p in choices])[0]
        counts[protocol] += 1
        crash: CrashPoint | None = None
        death: Death | None = None
        if crashes < MAX_CRASHES and rng.random() < CRASH_PROBABILITY:
            crash = rng.choice(CRASH_POINTS)
            death = rng.choice(DEATHS[protocol])
            crashes += 1
        if protocol == "openapi":
            pod = True
        elif protocol == "dashboard":
            pod = False
        elif death is not None:
            pod = death != "process_died"
        else:
            pod = rng.random() < POD_IDENTITY_PROBABILITY
        misbehaves = protocol in ("dashboard", "openapi")
        shape = rng.choice(sorted(SHAPES))
        plans.append(
            SubmitPlan(
                protocol=protocol,
                pod_identity=pod,
                start_delay=rng.uniform(0.0, 0.3),
                jobs=plan_search(rng, shape, f"{seed}x{i}"),
                crash=crash,
                death=death,
                intrude=misbehaves and rng.random() < 0.25,
                skip_count=misbehaves and rng.random() < 0.3,
                step_delay=rng.uniform(0.0, 0.08),
            )
        )
    return tuple(_with_stall(random.Random(f"stall-{seed}"), plans))


def _with_stall(rng: random.Random, plans: list[SubmitPlan]) -> list[SubmitPlan]:
    """Pick a staller (a library submitter) and, if there is one, its taker (a
    dashboard), neither dying."""
    stallers = [i for i, p in enumerate(plans) if p.protocol == "client" and p.death is None]
    takers = [i for i, p in enumerate(plans) if p.protocol == "dashboard" and p.death is None]
    if not stallers:
        return plans
    out = list(plans)
    staller = rng.choice(stallers)
    if takers:
        out[staller] = dataclasses.replace(plans[staller], stall="taken_over")
        taker = rng.choice(takers)
        out[taker] = dataclasses.replace(plans[taker], takes_over=True)
    else:
        out[staller] = dataclasses.replace(plans[staller], stall="left_alone")
    return out


CI_SEEDS: tuple[int, ...] = tuple(range(53, 65))
"""The fixed seeds of the bounded run in ``make test``: twelve consecutive seeds whose
schedules include every path, sizes 2 to 9+, intrusions, failed and retried Jobs, and
every way of dying at least twice (``tests/reliability`` checks that they did)."""
NAMESPACE_SLOTS = 6
"""Schedules that run at once in CI (each in its own namespace)."""
