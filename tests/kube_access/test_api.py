"""The shared async API layer against the real API server: deadlines, typed
errors, watch streams, and credentials that stay fresh.

Faults the API server does not make on request (no answer, a gateway's error
page, a watch whose resourceVersion was compacted away) come from the TLS
fault proxy in front of it.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from client.errors import explain_api_failure
from elbgate.kube.api import (
    JOBS,
    LEASES,
    ApiError,
    ApiUnavailable,
    Json,
    KubeApi,
    NoCredentials,
    path,
    resource_path,
)
from elbgate.kube.config import CredentialError, KubeConfig, KubeConfigError, TokenSource
from elbgate.serving.credential_metrics import register_credential_failures
from testbed.controlplane import ControlPlane
from testbed.faultproxy import FaultProxy

WHOAMI = resource_path("authentication.k8s.io/v1", "selfsubjectreviews")


@pytest.fixture(scope="module")
def ns(control_plane: ControlPlane) -> str:
    return control_plane.new_namespace("api-layer")


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[KubeApi]:
    """Straight to the API server, as the cluster administrator."""
    async with KubeApi(KubeConfig.from_kubeconfig(control_plane.kubeconfig("admin"))) as client:
        yield client


@pytest.fixture
async def faulty(control_plane: ControlPlane, proxy: FaultProxy) -> AsyncIterator[KubeApi]:
    """Through the fault proxy, as the cluster administrator; faults cleared after."""
    config = KubeConfig.from_kubeconfig(proxy.kubeconfig(control_plane.token("admin"), "api-layer"))
    try:
        async with KubeApi(config) as client:
            yield client
    finally:
        proxy.clear()


def lease(ns: str, name: str) -> Json:
    """A Lease that no webhook guards (not an ``elb-blast-submit-*`` name)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 60},
    }


def suspended_job(ns: str, name: str, app: str, **container: Any) -> Json:
    """A Job that makes no Pods (suspended): only its object matters here."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", **container}],
                }
            },
        },
    }


async def whoami(api: KubeApi) -> str:
    """The username the API server authenticated this client as."""
    review = await api.create(
        WHOAMI, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    return str(review["status"]["userInfo"]["username"])


def test_paths_follow_the_api_layout() -> None:
    assert (
        path(LEASES, "ns", "elb-blast-submit-ns")
        == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/elb-blast-submit-ns"
    )
    assert resource_path("v1", "pods", "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert path(JOBS, "ns", "j", "status") == "/apis/batch/v1/namespaces/ns/jobs/j/status"
    assert resource_path("v1", "namespaces") == "/api/v1/namespaces"


async def test_a_status_error_keeps_code_reason_and_message(api: KubeApi, ns: str) -> None:
    with pytest.raises(ApiError) as err:
        await api.get(path(LEASES, ns, "missing"))
    assert (err.value.code, err.value.reason, err.value.not_found) == (404, "NotFound", True)
    assert err.value.message == 'leases.coordination.k8s.io "missing" not found'
    assert err.value.body["details"] == {
        "name": "missing",
        "group": "coordination.k8s.io",
        "kind": "leases",
    }


async def test_absence_is_a_normal_outcome_for_get_or_none(api: KubeApi, ns: str) -> None:
    await api.create(path(LEASES, ns), lease(ns, "present"))
    assert await api.get_or_none(path(LEASES, ns, "missing")) is None
    found = await api.get_or_none(path(LEASES, ns, "present"))
    assert found is not None and found["metadata"]["name"] == "present"


async def test_a_missing_namespace_is_a_404_that_names_it(api: KubeApi) -> None:
    with pytest.raises(ApiError) as err:
        await api.create(path(LEASES, "no-such-namespace"), lease("no-such-namespace", "x"))
    assert err.value.not_found
    assert err.value.message == 'namespaces "no-such-namespace" not found'


async def test_a_non_status_error_body_is_still_an_api_error(
    faulty: KubeApi, proxy: FaultProxy, ns: str
) -> None:
    # A gateway in front of the API server answers with its own page, not a Status.
    proxy.add(method="GET", resource="leases", status=502, body="<html>bad gateway</html>")
    with pytest.raises(ApiError) as err:
        await faulty.get(path(LEASES, ns, "anything"))
    assert err.value.code == 502
    assert "HTTP 502: <html>bad gateway</html>" in err.value.message


async def test_no_answer_within_the_deadline_is_unavailable(
    faulty: KubeApi, proxy: FaultProxy, ns: str
) -> None:
    proxy.add(method="GET", resource="leases", name="slow", delay=30)
    with pytest.raises(ApiUnavailable, match=r"no answer within 0\.2s"):
        await faulty.get(path(LEASES, ns, "slow"), deadline=0.2)


async def test_a_dropped_connection_is_unavailable(
    faulty: KubeApi, proxy: FaultProxy, ns: str
) -> None:
    # Every time: aiohttp sends an idempotent request again once when a pooled
    # connection closes under it.
    proxy.add(method="GET", resource="leases", drop=True, count=None)
    with pytest.raises(ApiUnavailable, match=f"GET {path(LEASES, ns, 'x')}: "):
        await faulty.get(path(LEASES, ns, "x"))


async def test_a_stale_resource_version_is_a_conflict(api: KubeApi, ns: str) -> None:
    created = await api.create(path(LEASES, ns), lease(ns, "cas"))
    first = created["metadata"]["resourceVersion"]
    updated = await api.replace(
        path(LEASES, ns, "cas"), {**created, "spec": {"holderIdentity": "a"}}
    )
    assert updated["metadata"]["resourceVersion"] != first
    stale = {**created, "spec": {"holderIdentity": "b"}}
    with pytest.raises(ApiError) as err:
        await api.replace(path(LEASES, ns, "cas"), stale)
    assert err.value.conflict and err.value.reason == "Conflict"
    assert "the object has been modified" in err.value.message
    fresh = {**updated, "spec": {"holderIdentity": "b"}}
    written = await api.replace(path(LEASES, ns, "cas"), fresh)
    assert written["spec"]["holderIdentity"] == "b"


async def test_a_lease_put_without_a_resource_version_is_invalid_not_a_conflict(
    api: KubeApi, ns: str
) -> None:
    # The real API server refuses an unconditional Lease update (422), so no
    # writer can overwrite a Lease it has not read.
    await api.create(path(LEASES, ns), lease(ns, "unconditional"))
    with pytest.raises(ApiError) as err:
        await api.replace(path(LEASES, ns, "unconditional"), lease(ns, "unconditional"))
    assert (err.value.code, err.value.reason, err.value.conflict) == (422, "Invalid", False)
    assert "metadata.resourceVersion" in err.value.message


async def test_list_sends_both_selectors(api: KubeApi, ns: str) -> None:
    for name, app in (("sel-a", "a"), ("sel-b", "b"), ("sel-c", "c"), ("sel-a2", "a")):
        await api.create(path(JOBS, ns), suspended_job(ns, name, app))
    body = await api.list_objects(
        path(JOBS, ns), label_selector="app in (a,b)", field_selector="metadata.name!=sel-a2"
    )
    assert sorted(j["metadata"]["name"] for j in body["items"]) == ["sel-a", "sel-b"]


async def test_watch_yields_events_then_raises_gone_when_the_version_is_too_old(
    api: KubeApi, faulty: KubeApi, proxy: FaultProxy, control_plane: ControlPlane
) -> None:
    ns = control_plane.new_namespace("watch")
    since = (await api.list_objects(path(JOBS, ns)))["metadata"]["resourceVersion"]
    for n in range(2):
        await api.create(path(JOBS, ns), suspended_job(ns, f"j{n}", "blast"))
    added: list[str] = []
    async for event in api.watch(path(JOBS, ns), resource_version=since, timeout_seconds=60):
        if event["type"] == "ADDED":
            added.append(event["object"]["metadata"]["name"])
        if len(added) == 2:
            break
    assert added == ["j0", "j1"]
    # A resourceVersion etcd has compacted away: the API server answers the watch
    # with an ERROR event carrying a 410 Status; the caller relists.
    proxy.add(resource="jobs", watch=True, watch_gone=True)
    with pytest.raises(ApiError) as err:
        async for _ in faulty.watch(path(JOBS, ns), resource_version=since):
            pass
    assert err.value.gone and err.value.reason == "Expired"
    assert "too old resource version" in err.value.message


async def test_a_watch_refused_with_a_410_status_is_gone(
    faulty: KubeApi, proxy: FaultProxy, ns: str
) -> None:
    proxy.add(resource="jobs", watch=True, status=410)
    with pytest.raises(ApiError) as err:
        async for _ in faulty.watch(path(JOBS, ns), resource_version="1"):
            pass
    assert err.value.gone


async def test_a_watch_event_as_large_as_any_object_is_read_whole(
    api: KubeApi, control_plane: ControlPlane
) -> None:
    ns = control_plane.new_namespace("watch-big")
    since = (await api.list_objects(path(JOBS, ns)))["metadata"]["resourceVersion"]
    # A Job near the API server's 1.5 MB object limit arrives as one watch line.
    blob = "x" * 1_400_000
    await api.create(path(JOBS, ns), suspended_job(ns, "huge", "blast", args=[blob]))
    await api.create(path(JOBS, ns), suspended_job(ns, "after", "blast"))
    events: list[Json] = []
    async for event in api.watch(path(JOBS, ns), resource_version=since, timeout_seconds=60):
        if event["type"] == "ADDED":
            events.append(event)
        if len(events) == 2:
            break
    assert [e["object"]["metadata"]["name"] for e in events] == ["huge", "after"]
    container = events[0]["object"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == [blob]


async def test_a_refused_connection_is_unavailable(control_plane: ControlPlane) -> None:
    config = KubeConfig(host="https://127.0.0.1:1", ca_file=control_plane.ca_file)
    async with KubeApi(config, timeout=5) as client:
        with pytest.raises(ApiUnavailable, match="GET /version: ClientConnectorError"):
            await client.get("/version")


async def test_a_rotated_token_file_is_picked_up(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # The kubelet rotates a projected service-account token in place.
    token_file = tmp_path / "token"
    token_file.write_text(control_plane.token("alice") + "\n")
    source = TokenSource(path=str(token_file), reread_seconds=0)
    config = KubeConfig(host=control_plane.server, ca_file=control_plane.ca_file, token=source)
    async with KubeApi(config) as client:
        assert await whoami(client) == "alice"
        token_file.write_text(control_plane.token("bob"))
        assert await whoami(client) == "bob"
        token_file.unlink()
        assert await whoami(client) == "bob"  # keep the last good token


def test_a_token_is_obtained_again_at_the_very_instant_it_is_due(tmp_path: Path) -> None:
    # The cause of the exec-plugin test below failing now and then ('alice' == 'bob'):
    # "now - loaded_at >= period" rounds below the period for about one start time in
    # ten (on a node up for 300.3 s: 600.3 - 300.3 == 299.99999999999994), so a token
    # due at that instant was not obtained again. Due means now >= loaded_at + period.
    token_file = tmp_path / "token"
    token_file.write_text("rotated")
    loaded = 300.3
    source = TokenSource(
        token="first",
        path=str(token_file),
        reread_seconds=300.0,
        loaded_at=loaded,
        clock=lambda: loaded + 300.0,
    )
    assert source.current() == "rotated"


def jwt(claims: dict[str, Any]) -> str:
    """An unsigned token of JWT form (as projected service-account tokens are)."""

    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def test_an_unreadable_token_file_keeps_its_token_until_it_expires_then_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The kubelet stopped rotating it: the projected token is good until its exp,
    # and past that the call fails naming the file, not with the API server's 401.
    token_file = tmp_path / "token"
    wall, now = 1_800_000_000.0, 1000.0
    token = jwt({"sub": "system:serviceaccount:elb:elb-gate", "exp": int(wall) + 600})
    token_file.write_text(token)
    source = TokenSource(
        path=str(token_file), reread_seconds=60, clock=lambda: now, wall=lambda: wall
    )
    assert source.current() == token
    token_file.unlink()
    now += 60
    with caplog.at_level(logging.WARNING, logger="elbgate.kube.config"):
        assert source.current() == token  # still valid for 540 s
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING
    assert "No such file" in source.last_error and source.failures == 1
    now += 540
    with pytest.raises(CredentialError, match=f"token file {token_file}: .*No such file"):
        source.current()
    assert source.failures == 2


def test_a_token_file_is_read_on_first_use_on_a_freshly_booted_node(tmp_path: Path) -> None:
    # time.monotonic() counts from boot: a pod starting 5 s after its node booted
    # must still send its token on the first call, not after reread_seconds.
    token_file = tmp_path / "token"
    token_file.write_text("projected")
    source = TokenSource(path=str(token_file), reread_seconds=60, clock=lambda: 5.0)
    assert source.current() == "projected"


def test_a_missing_kubeconfig_names_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="set KUBECONFIG or --kubeconfig"):
        KubeConfig.from_kubeconfig(str(tmp_path / "nope"))


def exec_plugin_kubeconfig(
    cp: ControlPlane,
    tmp_path: Path,
    token_file: Path,
    slow: Path | None = None,
    expires: Path | None = None,
) -> Path:
    """A kubeconfig whose user runs an exec plugin (as kubelogin on AKS) that
    prints the token currently in ``token_file`` (after the seconds written in
    ``slow``, if that file exists), with the ``expirationTimestamp`` written in
    ``expires`` if that file exists. With ``token_file`` missing, the plugin fails
    (exit 1, a ``FileNotFoundError`` traceback on stderr)."""
    plugin = tmp_path / "plugin.py"
    pause = (
        f"p = pathlib.Path({str(slow)!r})\nif p.exists(): time.sleep(float(p.read_text()))\n"
        if slow
        else ""
    )
    expiry = (
        f"e = pathlib.Path({str(expires)!r})\n"
        "if e.exists(): status['expirationTimestamp'] = e.read_text()\n"
        if expires
        else ""
    )
    plugin.write_text(
        "import json, pathlib, time\n"
        + pause
        + f"status = {{'token': pathlib.Path({str(token_file)!r}).read_text()}}\n"
        + expiry
        + "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',"
        " 'kind': 'ExecCredential', 'status': status}))\n"
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "aks",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": cp.server, "certificate-authority": cp.ca_file},
                    }
                ],
                "contexts": [
                    {"name": "aks", "context": {"cluster": "c", "user": "u", "namespace": "blast"}}
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1beta1",
                                "command": sys.executable,
                                "args": [str(plugin)],
                            }
                        },
                    }
                ],
            }
        )
    )
    return kubeconfig


async def test_an_exec_plugin_token_is_obtained_again_when_due(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # AKS kubeconfigs get tokens from kubelogin (an exec plugin); they expire
    # within the hour a capacity wait plus a submit can take.
    current = tmp_path / "current-token"
    current.write_text(control_plane.token("alice"))
    config = KubeConfig.from_kubeconfig(
        str(exec_plugin_kubeconfig(control_plane, tmp_path, current))
    )
    assert config.namespace == "blast"
    source = config.token
    assert source.reload is not None and source.loaded_at is not None
    loaded = source.loaded_at
    async with KubeApi(config) as client:
        assert await whoami(client) == "alice"
        current.write_text(control_plane.token("bob"))
        # The clock, not the host's uptime, decides when the plugin runs again.
        source.clock = lambda: loaded + source.reread_seconds - 1
        assert await whoami(client) == "alice", "not due yet: the plugin is not run again"
        source.clock = lambda: loaded + source.reread_seconds
        assert await whoami(client) == "bob", source.last_error
        assert source.failures == 0


async def test_a_slow_exec_plugin_does_not_count_against_the_api_deadline(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # kubelogin may take seconds (a busy node, a round trip to the identity provider):
    # that is not the API server failing to answer. Counted against the call's
    # deadline, it made the call above fail as "no answer" on a loaded machine.
    current, slow = tmp_path / "current-token", tmp_path / "slow"
    current.write_text(control_plane.token("alice"))
    config = KubeConfig.from_kubeconfig(
        str(exec_plugin_kubeconfig(control_plane, tmp_path, current, slow))
    )
    source = config.token
    assert source.loaded_at is not None
    loaded = source.loaded_at
    async with KubeApi(config, timeout=5.0) as client:
        slow.write_text("6")  # longer than the whole deadline
        current.write_text(control_plane.token("bob"))
        source.clock = lambda: loaded + source.reread_seconds
        assert await whoami(client) == "bob"


def test_a_static_kubeconfig_token_is_never_reloaded(control_plane: ControlPlane) -> None:
    config = KubeConfig.from_kubeconfig(control_plane.kubeconfig("alice"))
    assert config.token.reload is None
    assert config.token.current() == control_plane.token("alice")
    assert config.host == control_plane.server


def test_an_exec_plugin_that_fails_keeps_the_last_good_token(
    control_plane: ControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    current = tmp_path / "current-token"
    current.write_text("first")
    config = KubeConfig.from_kubeconfig(
        str(exec_plugin_kubeconfig(control_plane, tmp_path, current))
    )
    source = config.token
    assert source.loaded_at is not None
    loaded = source.loaded_at
    current.unlink()  # the plugin now exits non-zero
    source.clock = lambda: loaded + source.reread_seconds
    with caplog.at_level(logging.WARNING, logger="elbgate.kube.config"):
        assert source.current() == "first"  # no expiry given: kept until refused
    # Not silently: logged with the plugin's own error, and counted.
    (warning,) = caplog.records
    assert "exec: process returned 1" in warning.elb_fields["reason"]  # type: ignore[attr-defined]
    assert "FileNotFoundError" in source.last_error and source.failures == 1
    # and it tries again on the next call, not only after another reread period
    current.write_text("second")
    assert source.current() == "second"


async def test_an_exec_plugin_token_is_kept_only_while_valid_then_the_call_says_why(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # kubelogin tokens carry expirationTimestamp. As client-go: obtained again once
    # expired (even before the reread period), and when that fails the call fails
    # with the plugin's error instead of going out with an expired token.
    current, expires = tmp_path / "current-token", tmp_path / "expires"
    current.write_text(control_plane.token("alice"))
    config = KubeConfig.from_kubeconfig(
        str(exec_plugin_kubeconfig(control_plane, tmp_path, current, expires=expires))
    )
    source = config.token
    wall, now = float(int(time.time())), 0.0  # whole seconds, as the timestamp is written
    source.clock, source.wall = (lambda: now), (lambda: wall)
    source.loaded_at = None  # obtain it now, with its expiry
    expires.write_text(datetime.fromtimestamp(wall + 120, UTC).isoformat())
    async with KubeApi(config) as client:
        assert await whoami(client) == "alice", source.last_error
        now += 120  # expired; the reread period (300 s) is not over
        current.write_text(control_plane.token("bob"))
        assert await whoami(client) == "bob", source.last_error
        now += 60  # bob's token is good for 60 s more, the reread not due: no plugin run
        current.unlink()
        assert await whoami(client) == "bob"
        now += 60  # expired: the plugin runs, fails, and no valid token is left to send
        with pytest.raises(NoCredentials, match=r"getting credentials .*exec: process returned 1"):
            await whoami(client)
        assert source.failures == 1 and "FileNotFoundError" in source.last_error


async def test_an_exec_plugin_that_fails_at_start_fails_the_first_call_with_its_reason(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # The official loader logs a failing plugin and carries on with no token; the
    # first call then went out anonymous and came back 401/403, reason lost.
    config = KubeConfig.from_kubeconfig(
        str(exec_plugin_kubeconfig(control_plane, tmp_path, tmp_path / "missing"))
    )
    async with KubeApi(config) as client:
        with pytest.raises(NoCredentials, match=r"POST .*getting credentials .*FileNotFoundError"):
            await whoami(client)
    # What the CLI and the client library say of it: what to fix, not "did not answer".
    with pytest.raises(NoCredentials) as raised:
        async with KubeApi(config) as client:
            await whoami(client)
    explained = explain_api_failure("GET lease", "blast", raised.value)
    assert "no valid credentials" in explained and "kubelogin" in explained
    assert "FileNotFoundError" in explained


def test_failed_token_reloads_are_counted_for_prometheus(tmp_path: Path) -> None:
    # What both servers export (elb_gate_credential_failures_total{component}): the
    # warning an alert can see while the last token is still being used.
    registry = CollectorRegistry()
    source = TokenSource(token="last", path=str(tmp_path / "gone"), reread_seconds=0)
    register_credential_failures(registry, "controller", source)
    sample = ("elb_gate_credential_failures_total", {"component": "controller"})
    assert registry.get_sample_value(*sample) == 0
    assert source.current() == "last" and source.current() == "last"
    assert registry.get_sample_value(*sample) == 2
