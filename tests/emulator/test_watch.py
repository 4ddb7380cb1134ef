"""Watch: initial state, resuming from a resourceVersion, 410 Expired, selectors, bookmarks."""

from __future__ import annotations

import threading

import pytest

from tests.emulator.rest import watch_lines
from tests.emulator.waiting import wait_for
from tests.kube_emulator import Emulator

CMS = "/api/v1/namespaces/default/configmaps"


def _cm(emu: Emulator, name: str, labels: dict | None = None) -> dict:
    return emu.create({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "labels": labels or {}}, "data": {"k": "v"}})


def test_without_a_resource_version_watch_starts_with_the_current_state(
        emulator: Emulator) -> None:
    _cm(emulator, "a")
    _cm(emulator, "b")
    events = watch_lines(emulator, f"{CMS}?watch=true&timeoutSeconds=5", limit=2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"), ("ADDED", "b")]
    assert events[0]["object"]["kind"] == "ConfigMap"


def test_watch_from_a_resource_version_replays_later_events(emulator: Emulator) -> None:
    rv = _cm(emulator, "a")["metadata"]["resourceVersion"]
    emulator.patch("configmaps", "default", "a", lambda o: o["data"].update(k="w"))
    _cm(emulator, "b")
    emulator.delete("configmaps", "default", "a")
    events = watch_lines(emulator, f"{CMS}?watch=1&resourceVersion={rv}&timeoutSeconds=5",
                         limit=3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)


def test_live_events_arrive_on_an_open_watch(emulator: Emulator) -> None:
    rv = emulator.store.resource_version
    result: list[dict] = []
    reader = threading.Thread(target=lambda: result.extend(watch_lines(
        emulator, f"/api/v1/watch/namespaces/default/configmaps?resourceVersion={rv}",
        limit=2)))
    reader.start()
    _cm(emulator, "live1")
    _cm(emulator, "live2")
    reader.join(10)
    assert [e["object"]["metadata"]["name"] for e in result] == ["live1", "live2"]


def test_a_resource_version_older_than_the_history_gets_an_expired_error_event(
        emulator: Emulator) -> None:
    rv = _cm(emulator, "a")["metadata"]["resourceVersion"]
    _cm(emulator, "b")
    emulator.compact()
    events = watch_lines(emulator, f"{CMS}?watch=true&resourceVersion={rv}")
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    current = emulator.store.resource_version
    assert status["message"] == f"too old resource version: {rv} ({current})"


def test_label_selector_transitions_become_added_and_deleted(emulator: Emulator) -> None:
    rv = emulator.store.resource_version
    _cm(emulator, "x", {"app": "blast"})
    emulator.patch("configmaps", "default", "x", lambda o: o["metadata"].update(labels={}))
    emulator.patch("configmaps", "default", "x",
                   lambda o: o["metadata"].update(labels={"app": "blast"}))
    _cm(emulator, "y", {"app": "web"})
    events = watch_lines(
        emulator, f"{CMS}?watch=true&resourceVersion={rv}&labelSelector=app%3Dblast"
        "&timeoutSeconds=5", limit=3)
    assert [e["type"] for e in events] == ["ADDED", "DELETED", "ADDED"]


def test_field_selector_on_name_filters_a_watch(emulator: Emulator) -> None:
    _cm(emulator, "a")
    _cm(emulator, "b")
    events = watch_lines(emulator, f"{CMS}?watch=true&fieldSelector=metadata.name%3Db"
                                   "&timeoutSeconds=5", limit=1)
    assert [e["object"]["metadata"]["name"] for e in events] == ["b"]


def test_bookmarks_carry_the_current_resource_version(emulator: Emulator) -> None:
    emulator.bookmark_interval = 0.05
    rv = _cm(emulator, "a")["metadata"]["resourceVersion"]
    events = watch_lines(emulator, f"{CMS}?watch=true&resourceVersion={rv}"
                                   "&allowWatchBookmarks=true", limit=1)
    assert events[0]["type"] == "BOOKMARK"
    assert events[0]["object"]["metadata"]["resourceVersion"] == rv
    assert events[0]["object"]["kind"] == "ConfigMap"


def test_send_initial_events_ends_with_an_initial_events_end_bookmark(
        emulator: Emulator) -> None:
    _cm(emulator, "a")
    events = watch_lines(emulator, f"{CMS}?watch=true&sendInitialEvents=true"
                                   "&allowWatchBookmarks=true", limit=2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}


def test_timeout_seconds_ends_the_stream(emulator: Emulator) -> None:
    assert watch_lines(emulator, f"{CMS}?watch=true&resourceVersion=1&timeoutSeconds=1") == []


def test_stopping_the_emulator_ends_open_watches(emulator: Emulator) -> None:
    result: list[dict] = []
    reader = threading.Thread(target=lambda: result.extend(
        watch_lines(emulator, f"{CMS}?watch=true")))
    reader.start()
    assert wait_for(lambda: bool(emulator.open_watches))
    emulator.stop()
    reader.join(10)
    assert not reader.is_alive()


def test_the_official_clients_watch_raises_410_once_history_is_gone(emulator: Emulator) -> None:
    from kubernetes import client as k8s
    from kubernetes import watch
    from kubernetes.client.rest import ApiException

    rv = _cm(emulator, "a")["metadata"]["resourceVersion"]
    config = k8s.Configuration()
    config.host, config.ssl_ca_cert = emulator.url, emulator.ca_file
    config.api_key = {"authorization": f"Bearer {emulator.token()}"}
    api = k8s.CoreV1Api(k8s.ApiClient(config))
    for event in watch.Watch().stream(api.list_namespaced_config_map, "default",
                                      resource_version="0", timeout_seconds=5):
        assert event["object"].metadata.name == "a"
        break
    _cm(emulator, "b")
    emulator.compact()
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(api.list_namespaced_config_map, "default",
                                      resource_version=rv, timeout_seconds=1):
            pass
    assert exc.value.status == 410
