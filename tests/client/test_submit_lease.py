"""SubmitLease against the real API server with elb-gate's webhook: the existing
submit paths' protocol, stamped and guarded server-side."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client import CoordinationError, LeaseBusy, LeaseLost, SubmitLease, SyncKube
from elbgate.kube import config as kube_config
from elbgate.kube.config import KubeConfig
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION, lease_name
from elbgate.settings import Settings
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy
from testbed.waiting import wait_until
from tests.client.conftest import (
    holder_of,
    lease_of,
    lease_writes,
    short_settings,
    small_settings,
    sync_kube,
    wait_until_expired,
)

SETTINGS = small_settings()


def lease(
    kube: SyncKube, ns: str, source: str = "cli", settings: Settings = SETTINGS
) -> SubmitLease:
    return SubmitLease(ns, gate=settings.gate, source=source, kube=kube)


@pytest.fixture
def faulty(control_plane: ControlPlane, proxy: FaultProxy) -> Iterator[SyncKube]:
    """alice's transport through the fault proxy; faults cleared after the test."""
    transport = sync_kube(proxy.kubeconfig(control_plane.token("alice"), "alice"), timeout=5)
    try:
        yield transport
    finally:
        transport.close()
        proxy.clear()


def test_the_first_acquire_creates_the_lease_with_holder_ttl_and_times(
    control_plane: ControlPlane, kube: SyncKube, ns: str
) -> None:
    mine = lease(kube, ns)
    result = mine.acquire()
    assert result.acquired and mine.held
    stored = lease_of(control_plane, ns)
    assert stored is not None
    spec = stored["spec"]
    assert spec["holderIdentity"] == mine.holder
    assert mine.holder.startswith("cli-") and len(mine.holder) == len("cli-") + 32
    assert spec["leaseDurationSeconds"] == 15
    assert spec["acquireTime"] == spec["renewTime"]
    # The webhook stamped who took it; a plain user runs in no pod.
    assert stored["metadata"]["annotations"] == {HOLDER_USER_ANNOTATION: "alice"}
    assert mine.view is not None and mine.view.holder_user == "alice"


def test_a_second_submitter_is_told_busy_with_who_holds_it(
    control_plane: ControlPlane, kube_of: Callable[[str], SyncKube], ns: str
) -> None:
    first, second = lease(kube_of("alice"), ns, "dashboard"), lease(kube_of("bob"), ns, "openapi")
    assert first.acquire().acquired
    result = second.acquire()
    assert not result.acquired and not second.held
    assert f"held by {first.holder} (user alice) until " in result.reason
    assert holder_of(control_plane, ns) == first.holder


def test_losing_the_create_race_is_busy(
    control_plane: ControlPlane, kube_of: Callable[[str], SyncKube], faulty: SyncKube,
    proxy: FaultProxy, ns: str,
) -> None:  # fmt: skip
    # The other path creates the Lease between our GET (404) and our POST.
    winner = lease(kube_of("bob"), ns, "dashboard")
    proxy.add(method="GET", resource="leases", status=404, count=1)
    assert winner.acquire().acquired
    result = lease(faulty, ns).acquire()
    assert not result.acquired
    assert "created by another submitter first" in result.reason
    assert "AlreadyExists" in result.reason
    assert holder_of(control_plane, ns) == winner.holder


def test_a_renewal_moves_renew_time_and_keeps_the_holder(
    control_plane: ControlPlane, kube: SyncKube, ns: str
) -> None:
    mine = lease(kube, ns)
    mine.acquire()
    before = lease_of(control_plane, ns)
    assert before is not None
    mine.renew()
    after = lease_of(control_plane, ns)
    assert after is not None
    assert after["spec"]["holderIdentity"] == mine.holder
    assert after["spec"]["renewTime"] > before["spec"]["renewTime"]
    assert after["spec"]["acquireTime"] == before["spec"]["acquireTime"]
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]


def test_an_expired_lease_is_taken_over_with_a_transition(
    control_plane: ControlPlane, kube_of: Callable[[str], SyncKube], ns: str
) -> None:
    old = lease(kube_of("alice"), ns, "dashboard", short_settings())
    old.acquire()
    wait_until_expired(control_plane, ns, SETTINGS.gate.clock_skew_seconds)
    new = lease(kube_of("bob"), ns, "openapi")
    assert new.acquire().acquired
    stored = lease_of(control_plane, ns)
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == new.holder
    assert stored["spec"]["leaseTransitions"] == 1
    assert stored["metadata"]["annotations"] == {HOLDER_USER_ANNOTATION: "bob"}
    with pytest.raises(LeaseLost):
        old.renew()
    assert old.lost.is_set()


def test_a_lease_inside_the_skew_margin_is_not_taken_over(
    control_plane: ControlPlane, kube_of: Callable[[str], SyncKube], ns: str
) -> None:
    # Past its 2 s duration (the webhook, with no skew, would admit a takeover),
    # but inside the client's 30 s margin: the client does not even try.
    old = lease(kube_of("alice"), ns, "dashboard", short_settings())
    old.acquire()
    stale = wait_until_expired(control_plane, ns)
    careful = lease(
        kube_of("bob"),
        ns,
        "openapi",
        small_settings(BLAST_SUBMIT_LEASE_TTL_SECONDS="120", BLAST_LEASE_CLOCK_SKEW_SECONDS="30"),
    )
    result = careful.acquire()
    assert not result.acquired
    assert f"held by {old.holder} (user alice) until " in result.reason
    after = lease_of(control_plane, ns)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == stale["metadata"]["resourceVersion"]


def test_release_clears_the_holder_and_never_deletes(
    control_plane: ControlPlane, kube: SyncKube, ns: str
) -> None:
    mine = lease(kube, ns)
    mine.acquire()
    assert mine.release() is True
    stored = lease_of(control_plane, ns)
    assert stored is not None and stored["spec"]["holderIdentity"] == ""
    assert HOLDER_USER_ANNOTATION not in (stored["metadata"].get("annotations") or {})
    assert not mine.held
    assert mine.release() is False, "a second release is a no-op"


def test_release_after_a_takeover_leaves_the_new_holder_alone(
    control_plane: ControlPlane, kube_of: Callable[[str], SyncKube], ns: str
) -> None:
    old = lease(kube_of("alice"), ns, "dashboard", short_settings())
    old.acquire()
    wait_until_expired(control_plane, ns, SETTINGS.gate.clock_skew_seconds)
    new = lease(kube_of("bob"), ns, "openapi")
    assert new.acquire().acquired
    # old's PUT is refused (409); the one re-read shows it is not ours.
    assert old.release() is False
    assert holder_of(control_plane, ns) == new.holder


def test_release_retries_once_after_an_unrelated_write(
    control_plane: ControlPlane, kube: SyncKube, ns: str
) -> None:
    mine = lease(kube, ns)
    mine.acquire()
    # The holder's own user labels the Lease (kubectl label): a new resourceVersion,
    # the same holder. (The guard refuses such a write from anyone else.)
    control_plane.api("alice").patch(
        "leases", ns, lease_name(ns), {"metadata": {"labels": {"touched": "yes"}}}
    )
    assert mine.release() is True
    assert holder_of(control_plane, ns) == ""


@pytest.mark.parametrize(
    "fault",
    [
        {"method": "GET", "status": 500},
        {"method": "GET", "status": 503},
        {"method": "GET", "drop": True, "count": None},
        {"method": "POST", "status": 500},
    ],
    ids=["500", "503", "dropped", "create-500"],
)
def test_an_api_failure_is_an_error_never_busy(
    control_plane: ControlPlane, faulty: SyncKube, proxy: FaultProxy, ns: str,
    fault: dict[str, object],
) -> None:  # fmt: skip
    proxy.add(resource="leases", **fault)
    mine = lease(faulty, ns)
    with pytest.raises(CoordinationError) as caught:
        mine.acquire()
    assert "busy" not in str(caught.value).replace("Not treated as busy", "")
    assert not mine.held
    assert lease_of(control_plane, ns) is None


def test_a_forbidden_read_names_rbac_and_what_to_grant(kube: SyncKube, fresh_ns: str) -> None:
    # A namespace where alice has no role at all: the API server's own RBAC says no.
    with pytest.raises(CoordinationError) as caught:
        lease(kube, fresh_ns).acquire()
    assert caught.value.status == 403
    message = str(caught.value)
    assert "forbidden by RBAC" in message
    assert 'User "alice" cannot get resource "leases"' in message
    assert "get/create/update on leases.coordination.k8s.io" in message


def test_an_unanswered_create_is_released_by_reading_first(
    control_plane: ControlPlane, faulty: SyncKube, proxy: FaultProxy, ns: str
) -> None:
    # The POST lands but its answer is lost: we may hold the Lease without knowing.
    proxy.add(method="POST", resource="leases", lose_answer=True)
    mine = lease(faulty, ns)
    with pytest.raises(CoordinationError, match="did not answer"):
        mine.acquire()
    assert holder_of(control_plane, ns) == mine.holder, "the write did land"
    assert not mine.held
    assert mine.release() is True
    assert holder_of(control_plane, ns) == ""


def test_the_context_manager_holds_then_releases(
    control_plane: ControlPlane, kube: SyncKube, ns: str
) -> None:
    with lease(kube, ns) as held:
        assert holder_of(control_plane, ns) == held.holder
    assert holder_of(control_plane, ns) == ""


def test_the_context_manager_raises_busy_without_touching_the_holder(
    control_plane: ControlPlane, kube_of: Callable[[str], SyncKube], ns: str
) -> None:
    first = lease(kube_of("bob"), ns, "dashboard")
    first.acquire()
    with pytest.raises(LeaseBusy, match=first.holder), lease(kube_of("alice"), ns):
        pass
    assert holder_of(control_plane, ns) == first.holder


def test_the_heartbeat_renews_until_release_and_then_stops(
    control_plane: ControlPlane, kube: SyncKube, ns: str
) -> None:
    mine = lease(kube, ns)
    mine.acquire()
    beat = mine.start_heartbeat(fraction=0.01)  # every 0.15 s

    def renewals() -> list[str]:
        return [
            w["spec"]["renewTime"]
            for w in lease_writes(control_plane, ns, "alice")
            if w["spec"].get("holderIdentity") == mine.holder
        ]

    def three() -> list[str] | None:
        found = renewals()
        return found if len(found) >= 3 else None

    seen = wait_until(three, 30, "three heartbeat renewals")
    assert seen == sorted(set(seen)), "each renewal moved renewTime on"
    mine.release()
    assert not beat.is_alive()
    assert holder_of(control_plane, ns) == ""


def test_the_heartbeat_reports_a_lost_lease(
    control_plane: ControlPlane, kube_of: Callable[[str], SyncKube], ns: str
) -> None:
    mine = lease(kube_of("alice"), ns, "cli", short_settings())
    mine.acquire()
    events: list[str] = []
    got = threading.Event()

    def on_event(kind: str, exc: Exception) -> None:
        events.append(kind)
        got.set()

    # Not renewed in time: it expires and another submit path takes it over.
    wait_until_expired(control_plane, ns, SETTINGS.gate.clock_skew_seconds)
    other = lease(kube_of("bob"), ns, "dashboard")
    assert other.acquire().acquired
    mine.start_heartbeat(fraction=0.25, on_event=on_event)
    assert got.wait(30)
    assert events == ["lost"] and mine.lost.is_set() and not mine.held
    mine.release()
    assert holder_of(control_plane, ns) == other.holder


def test_a_submitter_in_a_pod_is_stamped_with_its_pod(control_plane: ControlPlane, ns: str) -> None:
    # The in-cluster submit path: a token bound to its Pod (TokenRequest).
    pod = control_plane.pod_identity(ns, "elb-openapi")
    with sync_kube(pod.kubeconfig) as transport, lease(transport, ns, "openapi") as held:
        stored = lease_of(control_plane, ns)
        assert stored is not None and stored["spec"]["holderIdentity"] == held.holder
        assert stored["metadata"]["annotations"] == {
            HOLDER_USER_ANNOTATION: pod.username,
            HOLDER_POD_ANNOTATION: f"{ns}/{pod.pod}/{pod.pod_uid}",
        }
    assert holder_of(control_plane, ns) == ""


def test_the_in_cluster_configuration_uses_the_projected_token(
    control_plane: ControlPlane, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the kubelet mounts into the submitter's Pod, and the env it sets.
    pod = control_plane.pod_identity(ns, "elb-openapi")
    mounted = tmp_path / "serviceaccount"
    mounted.mkdir()
    (mounted / "token").write_text(pod.token)
    (mounted / "ca.crt").write_text(Path(control_plane.ca_file).read_text())
    (mounted / "namespace").write_text(ns)
    host, port = control_plane.server.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setattr(kube_config, "SA_DIR", mounted)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    config = KubeConfig.load()
    assert config.namespace == ns
    with SyncKube(config) as transport, lease(transport, config.namespace, "openapi"):
        stored = lease_of(control_plane, ns)
        assert stored is not None
        annotations = stored["metadata"]["annotations"]
        assert annotations[HOLDER_USER_ANNOTATION] == f"system:serviceaccount:{ns}:elb-openapi"
        assert annotations[HOLDER_POD_ANNOTATION] == pod.stamp
