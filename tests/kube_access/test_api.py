"""The shared async API layer: deadlines, typed errors, watch streams — over real TLS."""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import trustme
from aiohttp import web

from elbgate.kube.api import JOBS, LEASES, ApiError, ApiUnavailable, KubeApi, path, resource_path
from elbgate.kube.config import KubeConfig, TokenSource


def status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
        "metadata": {},
    }
    return web.json_response(body, status=code)


async def lease_get(request: web.Request) -> web.Response:
    assert request.headers["Authorization"] == "Bearer t-0"
    name = request.match_info["name"]
    if name == "missing":
        return status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
    if name == "slow":
        await asyncio.sleep(1)
    if name == "broken":
        return web.Response(status=502, text="<html>bad gateway</html>")
    return web.json_response({"metadata": {"name": name}, "spec": {}})


async def lease_put(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    if body["metadata"].get("resourceVersion") != "2":
        return status(
            409, "Conflict", "Operation cannot be fulfilled on leases.coordination.k8s.io"
        )
    return web.json_response(body)


async def jobs_list(request: web.Request) -> web.StreamResponse:
    if request.query.get("watch") == "true":
        resp = web.StreamResponse()
        await resp.prepare(request)
        if request.query["resourceVersion"] == "1":
            await resp.write(
                b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (9)"}}\n'
            )
            return resp
        if request.query["resourceVersion"] == "big":
            # A Job near the apiserver's 1.5 MB object limit, in one watch line.
            big = {"metadata": {"name": "huge"}, "spec": {"blob": "x" * 1_400_000}}
            await resp.write(orjson.dumps({"type": "ADDED", "object": big}) + b"\n")
            await resp.write(b'{"type":"ADDED","object":{"metadata":{"name":"after"}}}\n')
            return resp
        for n in range(2):
            await resp.write(
                orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": f"j{n}"}}}) + b"\n"
            )
        return resp
    return web.json_response({"kind": "JobList", "items": [], "query": dict(request.query)})


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path]:
    ca = trustme.CA()
    d = tmp_path_factory.mktemp("ca")
    ca.cert_pem.write_to_path(str(d / "ca.crt"))
    return ca, d / "ca.crt"


@pytest.fixture
async def api(tls: tuple[trustme.CA, Path]) -> AsyncIterator[KubeApi]:
    ca, ca_file = tls
    app = web.Application()
    app.router.add_get("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}", lease_get)
    app.router.add_put("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}", lease_put)
    app.router.add_get("/apis/batch/v1/namespaces/{ns}/jobs", jobs_list)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = runner.addresses[0][1]
    config = KubeConfig(
        host=f"https://127.0.0.1:{port}", ca_file=str(ca_file), token=TokenSource(token="t-0")
    )
    async with KubeApi(config, timeout=0.5) as client:
        yield client
    await runner.cleanup()


def test_paths_follow_the_api_layout() -> None:
    assert (
        path(LEASES, "ns", "elb-blast-submit-ns")
        == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/elb-blast-submit-ns"
    )
    assert resource_path("v1", "pods", "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert path(JOBS, "ns", "j", "status") == "/apis/batch/v1/namespaces/ns/jobs/j/status"
    assert resource_path("v1", "namespaces") == "/api/v1/namespaces"


async def test_a_status_error_keeps_code_reason_and_message(api: KubeApi) -> None:
    with pytest.raises(ApiError) as err:
        await api.get(path(LEASES, "ns", "missing"))
    assert (err.value.code, err.value.reason, err.value.not_found) == (404, "NotFound", True)
    assert "not found" in err.value.message


async def test_absence_is_a_normal_outcome_for_get_or_none(api: KubeApi) -> None:
    assert await api.get_or_none(path(LEASES, "ns", "missing")) is None
    assert (await api.get_or_none(path(LEASES, "ns", "x")))["metadata"]["name"] == "x"  # type: ignore[index]


async def test_a_non_status_error_body_is_still_an_api_error(api: KubeApi) -> None:
    with pytest.raises(ApiError) as err:
        await api.get(path(LEASES, "ns", "broken"))
    assert err.value.code == 502
    assert "HTTP 502" in err.value.message


async def test_no_answer_within_the_deadline_is_unavailable(api: KubeApi) -> None:
    with pytest.raises(ApiUnavailable, match=r"no answer within 0\.1s"):
        await api.get(path(LEASES, "ns", "slow"), deadline=0.1)


async def test_a_stale_resource_version_is_a_conflict(api: KubeApi) -> None:
    body = {"metadata": {"name": "x", "resourceVersion": "1"}}
    with pytest.raises(ApiError) as err:
        await api.replace(path(LEASES, "ns", "x"), body)
    assert err.value.conflict
    body["metadata"]["resourceVersion"] = "2"
    assert (await api.replace(path(LEASES, "ns", "x"), body))["metadata"]["resourceVersion"] == "2"


async def test_list_sends_both_selectors(api: KubeApi) -> None:
    body = await api.list_objects(
        path(JOBS, "ns"), label_selector="app in (a,b)", field_selector="status.successful=0"
    )
    assert body["query"] == {
        "labelSelector": "app in (a,b)",
        "fieldSelector": "status.successful=0",
    }


async def test_watch_yields_events_and_raises_gone_on_a_too_old_version(api: KubeApi) -> None:
    names = [
        e["object"]["metadata"]["name"]
        async for e in api.watch(path(JOBS, "ns"), resource_version="5")
    ]
    assert names == ["j0", "j1"]
    with pytest.raises(ApiError) as err:
        async for _ in api.watch(path(JOBS, "ns"), resource_version="1"):
            pass
    assert err.value.gone


async def test_a_refused_connection_is_unavailable(tls: tuple[trustme.CA, Path]) -> None:
    config = KubeConfig(host="https://127.0.0.1:1", ca_file=str(tls[1]))
    async with KubeApi(config, timeout=1) as client:
        with pytest.raises(ApiUnavailable):
            await client.get("/version")


def test_a_rotated_token_file_is_picked_up(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    source = TokenSource(path=str(token_file), reread_seconds=0)
    assert source.current() == "first"
    token_file.write_text("second")
    assert source.current() == "second"
    token_file.unlink()
    assert source.current() == "second"  # keep the last good token


def test_a_missing_kubeconfig_names_what_to_fix(tmp_path: Path) -> None:
    from elbgate.kube.config import KubeConfigError

    with pytest.raises(KubeConfigError, match="set KUBECONFIG or --kubeconfig"):
        KubeConfig.from_kubeconfig(str(tmp_path / "nope"))


def test_an_exec_plugin_token_is_obtained_again_when_due(tmp_path: Path) -> None:
    # AKS kubeconfigs get tokens from kubelogin (an exec plugin); they expire
    # within the hour a capacity wait plus a submit can take.
    current = tmp_path / "current-token"
    current.write_text("tok-1")
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',"
        " 'kind': 'ExecCredential',"
        f" 'status': {{'token': pathlib.Path({str(current)!r}).read_text()}}}}))\n"
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        orjson.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "aks",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
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
        ).decode()
    )
    config = KubeConfig.from_kubeconfig(str(kubeconfig))
    assert config.namespace == "blast"
    assert config.token.current() == "tok-1"
    current.write_text("tok-2")
    assert config.token.current() == "tok-1"  # not due yet
    config.token.loaded_at = 0.0
    assert config.token.current() == "tok-2"


def test_a_static_kubeconfig_token_is_never_reloaded(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        orjson.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "static"}}],
            }
        ).decode()
    )
    config = KubeConfig.from_kubeconfig(str(kubeconfig))
    assert config.token.reload is None
    assert (config.token.current(), config.namespace) == ("static", "default")


async def test_a_watch_event_as_large_as_any_object_is_read_whole(api: KubeApi) -> None:
    events = [e async for e in api.watch(path(JOBS, "ns"), resource_version="big")]
    assert [e["object"]["metadata"]["name"] for e in events] == ["huge", "after"]
    assert len(events[0]["object"]["spec"]["blob"]) == 1_400_000
