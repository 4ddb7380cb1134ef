"""The runtime set-up the webhook and the controller start with (elbgate.serving.runtime)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from elbgate.serving import runtime
from testbed import elastic_blast as elb


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collector pass while the test runs; the collector's
    thresholds and frozen objects as they were afterwards."""
    seen: list[int] = []

    def on_pass(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(int(info["generation"]))

    threshold = gc.get_threshold()
    gc.callbacks.append(on_pass)
    try:
        yield seen
    finally:
        gc.callbacks.remove(on_pass)
        gc.unfreeze()
        gc.set_threshold(*threshold)


def census_list(searches: int) -> bytes:
    """A census LIST answer as the API server sends it: the Jobs of ``searches``
    searches (setup, batches, finalizer: ElasticBLAST's shapes) under ``items``."""
    jobs = [
        job
        for n in range(searches)
        for job in elb.flow("cold-local-ssd", elb.search_id(n), nodes=3)
    ]
    return orjson.dumps({"kind": "JobList", "apiVersion": "batch/v1", "items": jobs})


def test_decoding_a_census_list_runs_the_collector_over_and_over_by_default(
    collections: list[int],
) -> None:
    """What tune_gc is for: at CPython's default thresholds, one LIST of 140 Jobs
    (about 4,400 dicts and lists; a real one carries managedFields too) is walked by
    the collector again and again while it is decoded."""
    raw = census_list(20)
    gc.set_threshold(700, 10, 10)
    gc.collect()
    collections.clear()
    decoded = orjson.loads(raw)
    assert len(decoded["items"]) == 140
    assert len(collections) >= 5, collections


def test_after_tune_gc_a_census_list_decodes_without_a_collector_pass(
    collections: list[int],
) -> None:
    raw = census_list(20)
    runtime.tune_gc()
    assert gc.get_threshold()[0] == runtime.YOUNG_GENERATION_THRESHOLD
    assert gc.get_freeze_count() > 0, "start-up's objects are frozen"
    collections.clear()
    decoded = orjson.loads(raw)
    assert len(decoded["items"]) == 140
    assert collections == []


def test_after_tune_gc_reference_cycles_are_still_collected(collections: list[int]) -> None:
    runtime.tune_gc()

    class Node:
        def __init__(self) -> None:
            self.other: Node | None = None

    before = len(gc.get_objects())
    for _ in range(runtime.YOUNG_GENERATION_THRESHOLD):  # each pair a cycle, dropped at once
        a, b = Node(), Node()
        a.other, b.other = b, a
    del a, b
    assert 0 in collections, "the young generation was collected"
    assert len(gc.get_objects()) < before + runtime.YOUNG_GENERATION_THRESHOLD
