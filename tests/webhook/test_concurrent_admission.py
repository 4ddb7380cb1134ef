"""Two first Jobs at the same moment, one webhook process receiving both.

Gate B and the one-staging-per-database rule are decisions over the namespace's state;
two requests judged side by side on the same observation would both pass. They must be
ordered: of two new searches' first Jobs at 2 of 3 active searches, exactly one is
admitted and the API server never holds 4 active ``elb-job-id``s; of two searches'
``init-ssd`` Jobs staging one database, exactly one is admitted. Every round is a race
on the real control plane (docs/design.md, "Gate B — search admission").
"""

from __future__ import annotations

import pytest

from testbed.controlplane import ControlPlane
from testbed.webhook_process import WebhookProcess
from tests.webhook.races import play_round, two_first_jobs, two_stagings_of_one_database

ROUNDS = 12

# Each round creates a namespace, seeds it and races: ~5 s a round on a busy machine.
pytestmark = [pytest.mark.timeout(900)]


def test_two_first_jobs_at_two_of_three_admit_exactly_one(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    over: list[str] = []
    for _ in range(ROUNDS):
        played = play_round(control_plane, hook.install.gate, two_first_jobs, seed=2)
        if len(played.admitted) != 1 or len(played.active_ids) > 3:
            over.append(played.describe())
        else:
            (refused,) = [s for s in played.sent if not s.admitted]
            assert refused.code == 429 and "Gate B: 3/3 searches already active" in refused.message
        control_plane.admin.delete("namespaces", None, played.namespace)
    assert not over, f"{len(over)} of {ROUNDS} rounds did not admit exactly one:\n" + "\n".join(
        over
    )


def test_two_stagings_of_one_database_admit_exactly_one(
    control_plane: ControlPlane, hook: WebhookProcess
) -> None:
    both: list[str] = []
    for _ in range(ROUNDS):
        played = play_round(control_plane, hook.install.gate, two_stagings_of_one_database, seed=0)
        if len(played.admitted) != 1 or len(played.unfinished_stagers) != 1:
            both.append(played.describe())
        else:
            (refused,) = [s for s in played.sent if not s.admitted]
            assert refused.code == 429 and "DB staging:" in refused.message, refused
        control_plane.admin.delete("namespaces", None, played.namespace)
    assert not both, f"{len(both)} of {ROUNDS} rounds did not admit exactly one:\n" + "\n".join(
        both
    )
