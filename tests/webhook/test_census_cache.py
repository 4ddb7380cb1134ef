"""The census watch's cache of one namespace (``webhook.census_watch``), without an API
server: what it holds, and when a read at a fence may take it (docs/design.md, "The
census read at a fence"). The fenced read itself, against the real API server and a
lagging watch: tests/webhook/test_census_watch.py."""

from __future__ import annotations

import asyncio

from tests.builders import job_object
from webhook.census_watch import _Namespace

FENCE = "elb-gate-census-fence-0123abcd"


def named(name: str, rv: str, app: str = "blast") -> dict[str, object]:
    obj = job_object(app, "a1", name=name)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_the_cache_holds_what_was_listed_and_watched_but_never_the_fence() -> None:
    view = _Namespace(FENCE)
    view.replace(
        "jobs", "ns", [named("blast-1", "10"), named(FENCE, "11", "elb-gate-census-fence")]
    )
    view.apply("jobs", "ns", "ADDED", named("blast-2", "12"))
    view.apply("jobs", "ns", "MODIFIED", named("blast-1", "13"))
    view.apply("jobs", "ns", "DELETED", named("blast-2", "14"))  # succeeded or deleted
    assert view.synced
    assert [j["metadata"]["name"] for j in view.jobs()] == ["blast-1"]
    assert view.jobs()[0]["metadata"]["resourceVersion"] == "13"


async def test_a_read_waits_until_the_watch_has_passed_its_fence() -> None:
    view = _Namespace(FENCE)
    view.replace("jobs", "ns", [])
    view.progress("100")
    waiting = asyncio.ensure_future(view.reached(105, 30))
    await asyncio.sleep(0.01)
    view.progress("104")  # an event before the fence: not yet
    await asyncio.sleep(0.01)
    assert not waiting.done()
    view.progress("105")
    assert await waiting is True


async def test_a_fence_already_passed_is_read_at_once() -> None:
    view = _Namespace(FENCE)
    view.replace("jobs", "ns", [])
    view.progress("200")
    assert await view.reached(150, 0) is True


async def test_a_watch_that_breaks_while_a_read_waits_sends_it_to_the_list() -> None:
    view = _Namespace(FENCE)
    view.replace("jobs", "ns", [])
    view.progress("100")
    waiting = asyncio.ensure_future(view.reached(105, 30))
    await asyncio.sleep(0.01)
    view.mark_unsynced("jobs", "ns")
    assert await waiting is False
    assert view.revision == 0  # a relist starts over from its own resourceVersion


async def test_a_fence_the_watch_does_not_reach_in_time_sends_the_read_to_the_list() -> None:
    view = _Namespace(FENCE)
    view.replace("jobs", "ns", [])
    view.progress("100")
    assert await view.reached(101, 0.05) is False


async def test_a_cache_never_listed_is_never_read() -> None:
    view = _Namespace(FENCE)
    view.progress("500")
    assert await view.reached(1, 0) is False


def test_a_resource_version_that_is_not_a_revision_moves_nothing() -> None:
    view = _Namespace(FENCE)
    view.progress("42")
    view.progress("not-a-number")
    assert view.revision == 42
