"""Two first Jobs at the same moment, the two webhook replicas each judging one of them.

As :mod:`tests.webhook.test_concurrent_admission`, with two replicas: no in-process
lock can order the two decisions, only the API server can. The configurations point at
the test bed's router (:mod:`testbed.router`), which holds each race's two Jobs until
both have come and sends one to each replica, at once; their logs say which one judged
each request.

The fast tier is enough: the race is between two processes' decisions, which only the
API server orders; the router only makes each race reach both replicas.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from testbed.api import JsonObj
from testbed.controlplane import ControlPlane
from testbed.rig import Rig
from tests.webhook.conftest import API_TIMEOUT_SECONDS
from tests.webhook.races import Round, play_round, two_first_jobs, two_stagings_of_one_database

ROUNDS = 12

pytestmark = [pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def rig(control_plane: ControlPlane) -> Iterator[Rig]:
    env = {"ELB_GATE_API_TIMEOUT_SECONDS": str(API_TIMEOUT_SECONDS)}
    with Rig(control_plane, [], controllers=0, env=env, per_request=True) as started:
        yield started


def judged_by(rig: Rig, played: Round) -> dict[str, int]:
    """Which replica (index) logged the admission of each racing Job."""
    out: dict[str, int] = {}
    names = {s.name for s in played.sent}
    for index, replica in enumerate(rig.hooks):
        for line in replica.log().splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if (
                record.get("msg") == "admission"
                and record.get("namespace") == played.namespace
                and record.get("name") in names
            ):
                out[str(record["name"])] = index
    return out


@pytest.mark.parametrize(
    ("bodies", "seed"),
    [
        pytest.param(two_first_jobs, 2, id="two first Jobs at 2 of 3"),
        pytest.param(two_stagings_of_one_database, 0, id="two stagings of one database"),
    ],
)
def test_two_replicas_judging_one_half_each_admit_exactly_one(
    control_plane: ControlPlane,
    rig: Rig,
    bodies: Callable[[str], list[JsonObj]],
    seed: int,
) -> None:
    wrong: list[str] = []
    assert rig.router is not None
    for _ in range(ROUNDS):
        played = play_round(
            control_plane, rig.install.gate, bodies, seed=seed, before_race=rig.router.pair
        )
        control_plane.admin.delete("namespaces", None, played.namespace)
        stagings = len(played.unfinished_stagers) if seed == 0 else 1
        if len(played.admitted) > 1 or len(played.active_ids) > 3 or stagings > 1:
            wrong.append(f"{stagings} unfinished stagings; {played.describe()}")
        judged = judged_by(rig, played)
        if sorted(judged.values()) != [0, 1]:
            wrong.append(f"judged by {judged}; {played.describe()}")
        if len(played.admitted) != 1 or stagings != 1:
            wrong.append(f"{stagings} unfinished stagings; {played.describe()}")
    assert not wrong, f"{len(wrong)} of {ROUNDS} rounds went wrong:\n" + "\n".join(wrong)
