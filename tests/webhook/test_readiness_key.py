"""The readiness key: a submit path, with only the Lease access its submitter RBAC
gives it, reads the Lease ``elb-gate-admission`` of its namespace as held and
unexpired while a webhook replica serves, and expired once none does."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from elbgate.names import ADMISSION_READY_LEASE
from testbed.clients import is_expired
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess

pytestmark = pytest.mark.kubectl

POD = "elb-gate-webhook-readiness"


def serving(control_plane: ControlPlane, namespace: str) -> bool:
    """What a client concludes, by its own Lease rule (no skew: the test's one clock)."""
    lease = control_plane.api("alice").find("leases", namespace, ADMISSION_READY_LEASE)
    if lease is None:
        return False
    spec = lease.get("spec") or {}
    return bool(spec.get("holderIdentity")) and not is_expired(
        spec, datetime.now(UTC), skew=0, default_ttl=0
    )


def test_the_key_is_held_while_a_replica_serves_and_expires_when_none_does(
    control_plane: ControlPlane,
) -> None:
    a, b = control_plane.new_namespace("ready"), control_plane.new_namespace("ready")
    env = {"ELB_GATE_NAMESPACES": f"{a},{b}"}
    hook = WebhookProcess(control_plane, env, pod=POD, namespaces=(a, b))
    with hook:
        wait_until(lambda: serving(control_plane, a) and serving(control_plane, b), 60, "the key")
        lease = control_plane.api("alice").get("leases", a, ADMISSION_READY_LEASE)
        assert lease["spec"]["holderIdentity"] == POD
        first = lease["spec"]["renewTime"]
        wait_until(
            lambda: (
                control_plane.admin.get("leases", a, ADMISSION_READY_LEASE)["spec"]["renewTime"]
                != first
            ),
            60,
            "a renewal",
        )
        # Alice may read it; the webhook's own configurations never judge it.
        assert hook.process is not None and hook.process.poll() is None
    # No replica left: the key stops being renewed and reads as not serving.
    wait_until(lambda: not serving(control_plane, a), 90, "the key expired")


class RecordingApi:
    """Answers every renewal, and says which namespaces were renewed."""

    def __init__(self) -> None:
        self.renewed: list[str] = []
        self.fail_next = False

    async def merge_patch(self, url: str, patch: dict[str, object]) -> dict[str, object]:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("an unexpected failure")
        self.renewed.append(url.split("/namespaces/")[1].split("/")[0])
        return {}


def test_renewal_follows_readiness_and_survives_an_unexpected_error() -> None:
    """Renewed only while /readyz last answered 200; a surprise in one renewal does not
    end the loop (a dead loop would read as "not serving" for ever)."""
    import asyncio

    from webhook.readiness_key import ReadinessKey

    async def scenario() -> list[int]:
        api = RecordingApi()
        key = ReadinessKey(api, ("a", "b"), "pod-0", renew_seconds=0.01)  # type: ignore[arg-type]
        task = asyncio.create_task(key.run())
        counts = []
        await asyncio.sleep(0.05)
        counts.append(len(api.renewed))  # not yet ready: nothing
        api.fail_next = True
        key.serving(True)
        for _ in range(1000):  # until renewed three times, or 10 s on a busy machine
            if len(api.renewed) >= 3:
                break
            await asyncio.sleep(0.01)
        counts.append(len(api.renewed))  # renewing, the failure survived
        key.serving(False)
        await asyncio.sleep(0.05)
        settled = len(api.renewed)
        await asyncio.sleep(0.1)
        counts.append(len(api.renewed) - settled)  # not ready: stopped
        task.cancel()
        return counts

    before, during, after = asyncio.run(scenario())
    assert before == 0 and during >= 3 and after == 0
