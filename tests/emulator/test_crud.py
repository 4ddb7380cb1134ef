"""CRUD over raw HTTPS and the official client: defaults, errors, status subresource, deletes."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.emulator.rest import call
from tests.kube_emulator import ApiError, Emulator, User

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
JOBS = "/apis/batch/v1/namespaces/default/jobs"


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _lease(name: str, holder: str = "a", rv: str | None = None) -> dict:
    meta: dict = {"name": name}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 900}}


def _job(name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox"}]}}}}


def _api_client(emu: Emulator, user: str = "alice") -> k8s.ApiClient:
    config = k8s.Configuration()
    config.host = emu.url
    config.ssl_ca_cert = emu.ca_file
    config.api_key = {"authorization": f"Bearer {emu.token(user)}"}
    return k8s.ApiClient(config)


def test_create_fills_in_server_defaults_and_one_global_resource_version(emu: Emulator) -> None:
    first = call(emu, "POST", LEASES, _lease(_name()))
    second = call(emu, "POST", LEASES, {**_lease(""), "metadata": {"generateName": "gen-"}})
    assert first.status == second.status == 201
    meta = first.body["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert int(second.body["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert second.body["metadata"]["name"].startswith("gen-")
    assert len(second.body["metadata"]["name"]) == len("gen-") + 5
    assert first.body["kind"] == "Lease" and first.body["apiVersion"] == "coordination.k8s.io/v1"


def test_list_has_list_kind_and_resource_version_and_items_without_kind(emu: Emulator) -> None:
    call(emu, "POST", JOBS, _job(_name("job")))
    reply = call(emu, "GET", JOBS)
    assert reply.body["kind"] == "JobList" and reply.body["apiVersion"] == "batch/v1"
    assert int(reply.body["metadata"]["resourceVersion"]) >= 1
    assert reply.body["items"] and "kind" not in reply.body["items"][0]


def test_missing_object_is_a_404_status_with_resource_group_in_message(emu: Emulator) -> None:
    reply = call(emu, "GET", f"{LEASES}/nope")
    assert reply.status == 404
    assert reply.body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'leases.coordination.k8s.io "nope" not found', "reason": "NotFound",
        "details": {"name": "nope", "group": "coordination.k8s.io", "kind": "leases"},
        "code": 404,
    }


def test_core_resources_have_no_group_in_messages(emu: Emulator) -> None:
    reply = call(emu, "GET", "/api/v1/namespaces/default/configmaps/nope")
    assert reply.body["message"] == 'configmaps "nope" not found'
    assert reply.body["details"] == {"name": "nope", "kind": "configmaps"}


def test_creating_an_existing_name_is_409_already_exists(emu: Emulator) -> None:
    name = _name()
    call(emu, "POST", LEASES, _lease(name))
    reply = call(emu, "POST", LEASES, _lease(name))
    assert (reply.status, reply.body["reason"]) == (409, "AlreadyExists")
    assert reply.body["message"] == f'leases.coordination.k8s.io "{name}" already exists'


def test_create_in_a_missing_namespace_is_404_for_the_namespace(emu: Emulator) -> None:
    reply = call(emu, "POST", "/api/v1/namespaces/ghost/configmaps",
                 {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    assert reply.status == 404
    assert reply.body["message"] == 'namespaces "ghost" not found'


def test_put_with_a_stale_resource_version_is_409_conflict(emu: Emulator) -> None:
    name = _name()
    created = call(emu, "POST", LEASES, _lease(name)).body
    rv = created["metadata"]["resourceVersion"]
    assert call(emu, "PUT", f"{LEASES}/{name}", _lease(name, "b", rv)).status == 200
    reply = call(emu, "PUT", f"{LEASES}/{name}", _lease(name, "c", rv))
    assert (reply.status, reply.body["reason"]) == (409, "Conflict")
    assert reply.body["message"] == (
        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again")
    assert reply.body["details"] == {"name": name, "group": "coordination.k8s.io",
                                     "kind": "leases"}


def test_put_without_resource_version_is_an_unconditional_update(emu: Emulator) -> None:
    name = _name()
    call(emu, "POST", LEASES, _lease(name))
    reply = call(emu, "PUT", f"{LEASES}/{name}", _lease(name, "zed"))
    assert reply.status == 200 and reply.body["spec"]["holderIdentity"] == "zed"


def test_a_noop_update_keeps_the_resource_version(emu: Emulator) -> None:
    name = _name()
    rv = call(emu, "POST", LEASES, _lease(name)).body["metadata"]["resourceVersion"]
    reply = call(emu, "PUT", f"{LEASES}/{name}", _lease(name, "a", rv))
    assert reply.body["metadata"]["resourceVersion"] == rv


@pytest.mark.parametrize("content_type,body", [
    ("application/merge-patch+json", {"spec": {"holderIdentity": "p"}}),
    ("application/strategic-merge-patch+json", {"spec": {"holderIdentity": "p"}}),
    ("application/json-patch+json", [{"op": "replace", "path": "/spec/holderIdentity",
                                      "value": "p"}]),
])
def test_patch_types_change_the_object(emu: Emulator, content_type: str, body: object) -> None:
    name = _name()
    call(emu, "POST", LEASES, _lease(name))
    reply = call(emu, "PATCH", f"{LEASES}/{name}", body, content_type=content_type)
    assert reply.status == 200 and reply.body["spec"]["holderIdentity"] == "p"


def test_patch_with_a_stale_resource_version_conflicts(emu: Emulator) -> None:
    name = _name()
    rv = call(emu, "POST", LEASES, _lease(name)).body["metadata"]["resourceVersion"]
    call(emu, "PUT", f"{LEASES}/{name}", _lease(name, "b"))
    reply = call(emu, "PATCH", f"{LEASES}/{name}",
                 {"metadata": {"resourceVersion": rv}, "spec": {"holderIdentity": "c"}},
                 content_type="application/merge-patch+json")
    assert reply.status == 409


def test_apply_patch_is_unsupported_media_type(emu: Emulator) -> None:
    name = _name()
    call(emu, "POST", LEASES, _lease(name))
    reply = call(emu, "PATCH", f"{LEASES}/{name}", b"spec: {}",
                 content_type="application/apply-patch+yaml")
    assert reply.status == 415


def test_job_create_clears_status_and_main_writes_ignore_status(emu: Emulator) -> None:
    name = _name("job")
    job = {**_job(name), "status": {"succeeded": 1}}
    created = call(emu, "POST", JOBS, job).body
    assert created["status"] == {} and created["metadata"]["generation"] == 1
    assert created["spec"]["backoffLimit"] == 6
    created["status"] = {"succeeded": 1}
    replaced = call(emu, "PUT", f"{JOBS}/{name}", created).body
    assert replaced["status"] == {}


def test_status_subresource_changes_only_status(emu: Emulator) -> None:
    name = _name("job")
    created = call(emu, "POST", JOBS, _job(name, {"app": "blast"})).body
    created["status"] = {"succeeded": 1}
    created["metadata"]["labels"] = {"app": "changed"}
    updated = call(emu, "PUT", f"{JOBS}/{name}/status", created).body
    assert updated["status"] == {"succeeded": 1}
    assert updated["metadata"]["labels"] == {"app": "blast"}
    patched = call(emu, "PATCH", f"{JOBS}/{name}/status", {"status": {"failed": 2}},
                   content_type="application/merge-patch+json").body
    assert patched["status"] == {"succeeded": 1, "failed": 2}


def test_a_spec_change_bumps_the_job_generation(emu: Emulator) -> None:
    name = _name("job")
    call(emu, "POST", JOBS, _job(name))
    patched = call(emu, "PATCH", f"{JOBS}/{name}", {"spec": {"suspend": True}},
                   content_type="application/merge-patch+json").body
    assert patched["metadata"]["generation"] == 2


def test_delete_preconditions_that_do_not_match_are_409(emu: Emulator) -> None:
    name = _name()
    created = call(emu, "POST", LEASES, _lease(name)).body
    stale = {"apiVersion": "v1", "kind": "DeleteOptions",
             "preconditions": {"resourceVersion": "1"}}
    assert call(emu, "DELETE", f"{LEASES}/{name}", stale).status == 409
    wrong_uid = {"preconditions": {"uid": "not-the-uid"}}
    assert call(emu, "DELETE", f"{LEASES}/{name}", wrong_uid).status == 409
    ok = {"preconditions": {"uid": created["metadata"]["uid"],
                            "resourceVersion": created["metadata"]["resourceVersion"]},
          "propagationPolicy": "Background"}
    reply = call(emu, "DELETE", f"{LEASES}/{name}", ok)
    assert reply.status == 200 and reply.body["status"] == "Success"
    assert call(emu, "GET", f"{LEASES}/{name}").status == 404


def test_finalizers_hold_a_deleted_object_until_they_are_removed(emu: Emulator) -> None:
    name = _name()
    call(emu, "POST", LEASES, {**_lease(name), "metadata": {"name": name,
                                                            "finalizers": ["x/y"]}})
    marked = call(emu, "DELETE", f"{LEASES}/{name}").body
    assert marked["metadata"]["deletionTimestamp"]
    call(emu, "PATCH", f"{LEASES}/{name}", {"metadata": {"finalizers": None}},
         content_type="application/merge-patch+json")
    assert call(emu, "GET", f"{LEASES}/{name}").status == 404


def test_dry_run_stores_nothing(emu: Emulator) -> None:
    name = _name()
    assert call(emu, "POST", f"{LEASES}?dryRun=All", _lease(name)).status == 201
    assert call(emu, "GET", f"{LEASES}/{name}").status == 404


def test_missing_or_unknown_token_is_401_unauthorized(emu: Emulator) -> None:
    reply = call(emu, "GET", LEASES, token="bogus")
    assert reply.status == 401
    assert reply.body["reason"] == "Unauthorized" and reply.body["message"] == "Unauthorized"


def test_discovery_lists_jobs_status_and_reports_version_1_32(emu: Emulator) -> None:
    assert call(emu, "GET", "/version").body["minor"] == "32"
    resources = {r["name"]: r for r in call(emu, "GET", "/apis/batch/v1").body["resources"]}
    assert resources["jobs"]["namespaced"] and "watch" in resources["jobs"]["verbs"]
    assert resources["jobs/status"]["verbs"] == ["get", "patch", "update"]
    groups = [g["name"] for g in call(emu, "GET", "/apis").body["groups"]]
    assert "coordination.k8s.io" in groups and "admissionregistration.k8s.io" in groups


def test_official_client_reads_and_gets_409_on_a_stale_replace(emu: Emulator) -> None:
    api = k8s.CoordinationV1Api(_api_client(emu))
    name = _name()
    body = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=name),
                       spec=k8s.V1LeaseSpec(holder_identity="a", lease_duration_seconds=900))
    created = api.create_namespaced_lease("default", body)
    read = api.read_namespaced_lease(name, "default")
    assert read.spec and created.spec and read.spec.holder_identity == "a"
    read.spec.holder_identity = "b"
    api.replace_namespaced_lease(name, "default", read)
    created.spec.holder_identity = "c"
    with pytest.raises(ApiException) as exc:
        api.replace_namespaced_lease(name, "default", created)
    assert exc.value.status == 409
    with pytest.raises(ApiException) as missing:
        api.read_namespaced_lease("nope", "default")
    assert missing.value.status == 404


def test_official_client_lists_jobs_cluster_wide_with_a_label_selector(emu: Emulator) -> None:
    name = _name("job")
    emu.create({**_job(name, {"app": "finalizer"}), "metadata": {
        "name": name, "namespace": "kube-system", "labels": {"app": "finalizer"}}})
    jobs = k8s.BatchV1Api(_api_client(emu)).list_job_for_all_namespaces(
        label_selector="app in (finalizer,blast)")
    assert name in [j.metadata.name for j in jobs.items if j.metadata]


def test_helpers_bypass_admission_and_keep_status_on_create(emu: Emulator) -> None:
    name = _name("job")
    job = emu.create({**_job(name), "status": {"succeeded": 1}})
    assert job["status"] == {"succeeded": 1}
    job["status"] = {"succeeded": 2}
    assert emu.update(job)["status"] == {"succeeded": 1}
    assert emu.update_status(job)["status"] == {"succeeded": 2}
    emu.delete("jobs", "default", name)
    with pytest.raises(ApiError) as exc:
        emu.get("jobs", "default", name)
    assert exc.value.code == 404
    assert emu.find("jobs", "default", name) is None


def test_service_account_users_carry_pod_extra() -> None:
    user = User.service_account("ns1", "sa", pod="p", pod_uid="u")
    assert user.user_info() == {
        "username": "system:serviceaccount:ns1:sa",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:ns1",
                   "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["p"],
                  "authentication.kubernetes.io/pod-uid": ["u"]},
    }


async def test_an_aiohttp_client_with_a_bearer_token_gets_the_same_statuses(
        emu: Emulator) -> None:
    import ssl

    import aiohttp

    ctx = ssl.create_default_context(cafile=emu.ca_file)
    headers = {"Authorization": f"Bearer {emu.token('alice')}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(emu.url + LEASES, json=_lease("aio"), ssl=ctx) as resp:
            assert resp.status == 201
        async with session.post(emu.url + LEASES, json=_lease("aio"), ssl=ctx) as resp:
            assert (resp.status, (await resp.json())["reason"]) == (409, "AlreadyExists")


def test_plain_http_can_be_served_alongside_https() -> None:
    import json
    import urllib.request

    with Emulator(http_port=0) as emu:
        assert emu.http_url and emu.http_url.startswith("http://127.0.0.1:")
        req = urllib.request.Request(f"{emu.http_url}/api/v1/namespaces",
                                     headers={"Authorization": f"Bearer {emu.token()}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            names = [n["metadata"]["name"] for n in json.load(resp)["items"]]
    assert names == ["default", "kube-system"]
