"""Store reads: LIST order and scope from the per-namespace index, and readers never
changing what is stored (a LIST shares the stored objects, helpers hand out copies)."""

from __future__ import annotations

import uuid

from tests.emulator.rest import call
from tests.kube_emulator import Emulator
from tests.kube_emulator.resources import by_plural
from tests.kube_emulator.selectors import parse_label_selector
from tests.kube_emulator.store import Store

JOBS, LEASES, NAMESPACES = by_plural("jobs"), by_plural("leases"), by_plural("namespaces")


def _job(name: str, namespace: str, app: str = "blast") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
            "spec": {"template": {"spec": {"containers": []}}}}


def _store(*namespaces: str) -> Store:
    store = Store()
    for namespace in namespaces:
        store.create(NAMESPACES, {"metadata": {"name": namespace}})
    return store


def _names(items: list[dict]) -> list[str]:
    return [f'{i["metadata"]["namespace"]}/{i["metadata"]["name"]}' for i in items]


def test_a_list_is_sorted_by_namespace_then_name_and_scoped_to_its_namespace() -> None:
    store = _store("b", "a")
    for namespace, name in [("b", "j2"), ("a", "j9"), ("b", "j1"), ("a", "j10")]:
        store.create(JOBS, _job(name, namespace))
    store.create(LEASES, {"metadata": {"name": "l", "namespace": "a"}, "spec": {}})
    assert _names(store.select(JOBS, None)[0]) == ["a/j10", "a/j9", "b/j1", "b/j2"]
    assert _names(store.select(JOBS, "b")[0]) == ["b/j1", "b/j2"]
    assert _names(store.select(JOBS, "missing")[0]) == []
    assert _names(store.select(LEASES, None)[0]) == ["a/l"]


def test_deletes_and_recreates_keep_the_order_and_the_label_filter() -> None:
    store = _store("a")
    for name in ["j3", "j1", "j2"]:
        store.create(JOBS, _job(name, "a", app="submit" if name == "j2" else "blast"))
    store.delete(JOBS, "a", "j1")
    store.create(JOBS, _job("j0", "a"))
    store.update(JOBS, {**store.get(JOBS, "a", "j3"), "spec": {"parallelism": 2}})
    assert _names(store.select(JOBS, "a")[0]) == ["a/j0", "a/j2", "a/j3"]
    blast, _ = store.select(JOBS, "a", parse_label_selector("app=blast"))
    assert _names(blast) == ["a/j0", "a/j3"]
    assert blast[1]["spec"]["parallelism"] == 2


def test_deleting_a_namespace_empties_its_lists() -> None:
    store = _store("a", "b")
    store.create(JOBS, _job("j", "a"))
    store.create(JOBS, _job("j", "b"))
    store.delete(NAMESPACES, None, "a")
    assert _names(store.select(JOBS, None)[0]) == ["b/j"]
    assert store.select(JOBS, "a")[0] == []


def test_a_copying_select_hands_out_copies_and_a_shared_one_the_stored_objects() -> None:
    store = _store("a")
    store.create(JOBS, _job("j", "a"))
    copied, _ = store.select(JOBS, "a")
    copied[0]["metadata"]["labels"]["app"] = "changed"
    assert store.get(JOBS, "a", "j")["metadata"]["labels"] == {"app": "blast"}
    shared, _ = store.select(JOBS, "a", shared=True)
    again, _ = store.select(JOBS, "a", shared=True)
    assert shared[0] is again[0]


def test_a_list_over_http_leaves_the_stored_objects_whole(emu: Emulator) -> None:
    name = f"whole-{uuid.uuid4().hex[:8]}"
    emu.create({"apiVersion": "batch/v1", "kind": "Job", **_job(name, "default")})
    listed = call(emu, "GET", "/apis/batch/v1/namespaces/default/jobs")
    assert listed.status == 200
    item = next(i for i in listed.body["items"] if i["metadata"]["name"] == name)
    assert "kind" not in item and "apiVersion" not in item
    stored = emu.get("jobs", "default", name)
    assert stored["kind"] == "Job" and stored["apiVersion"] == "batch/v1"
    fetched = call(emu, "GET", f"/apis/batch/v1/namespaces/default/jobs/{name}")
    assert fetched.body["kind"] == "Job"


def test_the_helpers_reads_are_copies(emu: Emulator) -> None:
    name = f"copy-{uuid.uuid4().hex[:8]}"
    emu.create({"apiVersion": "batch/v1", "kind": "Job", **_job(name, "default")})
    listed = next(j for j in emu.list("jobs", "default") if j["metadata"]["name"] == name)
    listed["metadata"]["labels"]["app"] = "changed"
    got = emu.get("jobs", "default", name)
    got["spec"] = {}
    stored = emu.get("jobs", "default", name)
    assert stored["metadata"]["labels"]["app"] == "blast" and stored["spec"]
