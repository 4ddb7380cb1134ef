"""The lean cache: what each watch event leaves behind, and when a namespace is synced."""

from __future__ import annotations

from controller.cache import Cache, Kind
from tests.builders import NS, ago, job_doc, lease_doc


def synced_cache(changes: list[str] | None = None) -> Cache:
    cache = Cache([NS], on_change=(changes.append if changes is not None else None))
    for kind in (Kind.JOBS, Kind.LEASES, Kind.CONFIGMAPS, Kind.ADMISSIONS):
        cache.replace(kind, NS, [])
    return cache


def test_a_namespace_is_synced_only_after_every_kind_has_listed() -> None:
    cache = Cache([NS])
    cache.replace(Kind.JOBS, NS, [])
    cache.replace(Kind.LEASES, NS, [])
    cache.replace(Kind.CONFIGMAPS, NS, [])
    assert not cache.synced(NS) and not cache.all_synced()
    cache.replace(Kind.ADMISSIONS, NS, [])
    assert cache.synced(NS) and cache.all_synced()


def test_a_failed_watch_unsyncs_the_namespace_until_it_relists() -> None:
    cache = synced_cache()
    cache.mark_unsynced(Kind.LEASES, NS)
    assert not cache.synced(NS)
    cache.replace(Kind.LEASES, NS, [lease_doc()])
    assert cache.synced(NS)


def test_unfinished_jobs_are_kept_as_refs_and_finished_ones_dropped() -> None:
    cache = synced_cache()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("b1", app="blast"))
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("f1"))
    assert {j.name for j in cache.snapshot(NS).unfinished} == {"b1", "f1"}
    cache.apply(Kind.JOBS, NS, "MODIFIED", job_doc("b1", app="blast", finished=True))
    snap = cache.snapshot(NS)
    assert [j.name for j in snap.unfinished] == ["f1"]
    assert snap.finished_marked == ()


def test_a_finished_job_that_still_carries_the_orphan_mark_is_kept_to_be_unmarked() -> None:
    cache = synced_cache()
    cache.apply(Kind.JOBS, NS, "MODIFIED", job_doc("f1", finished=True, orphaned_since=ago(5)))
    assert [j.name for j in cache.snapshot(NS).finished_marked] == ["f1"]
    cache.apply(Kind.JOBS, NS, "MODIFIED", job_doc("f1", finished=True))
    assert cache.snapshot(NS).finished_marked == ()


def test_a_deleted_job_is_forgotten() -> None:
    cache = synced_cache()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("f1"))
    cache.apply(Kind.JOBS, NS, "DELETED", job_doc("f1"))
    assert cache.snapshot(NS).unfinished == ()
    assert cache.job_count() == 0


def test_the_lease_and_the_liveness_configmap_follow_their_events() -> None:
    cache = synced_cache()
    cache.apply(Kind.LEASES, NS, "ADDED", lease_doc(rv="5"))
    cm = {
        "metadata": {"name": "elb-blast-liveness", "resourceVersion": "6"},
        "data": {"inUse": "true"},
    }
    cache.apply(Kind.CONFIGMAPS, NS, "ADDED", cm)
    snap = cache.snapshot(NS)
    assert snap.lease is not None and snap.lease.resource_version == "5"
    assert snap.liveness is not None and snap.liveness.data == {"inUse": "true"}
    cache.apply(Kind.LEASES, NS, "DELETED", lease_doc(rv="7"))
    assert cache.snapshot(NS).lease is None


def test_every_change_queues_the_namespace() -> None:
    changes: list[str] = []
    cache = synced_cache(changes)
    changes.clear()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("f1"))
    cache.apply(Kind.LEASES, NS, "MODIFIED", lease_doc())
    assert changes == [NS, NS]


def test_a_relist_replaces_everything_seen_before() -> None:
    cache = synced_cache()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("gone-while-disconnected"))
    cache.replace(Kind.JOBS, NS, [job_doc("still-here")])
    assert [j.name for j in cache.snapshot(NS).unfinished] == ["still-here"]


def test_write_through_applies_only_over_the_version_it_was_written_against() -> None:
    cache = synced_cache()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("f1", rv="10"))
    cache.write_through(Kind.JOBS, NS, "10", job_doc("f1", rv="11", orphaned_since=ago(1)))
    assert cache.snapshot(NS).unfinished[0].resource_version == "11"
    # The watch already brought something newer: our older result must not win.
    cache.apply(Kind.JOBS, NS, "MODIFIED", job_doc("f1", rv="13"))
    cache.write_through(Kind.JOBS, NS, "11", job_doc("f1", rv="12"))
    assert cache.snapshot(NS).unfinished[0].resource_version == "13"


def test_forget_job_drops_only_the_version_that_was_deleted() -> None:
    cache = synced_cache()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("f1", rv="10"))
    cache.forget_job(NS, "f1", "9")
    assert cache.job_count() == 1
    cache.forget_job(NS, "f1", "10")
    assert cache.job_count() == 0


def test_batch_work_that_leaves_the_live_watch_is_remembered_until_the_next_relist() -> None:
    # A finalizer whose batch Jobs finished is merging results, not orphaned: the cache
    # must remember that batch work existed even though it drops finished Jobs. The Jobs
    # watch selects live Jobs (status.successful=0), so a batch Job that succeeds leaves
    # it with a DELETED event carrying the Job as it was: a deletion and a success look
    # the same, and either way the batch work existed.
    from tests.builders import NS, job_doc

    cache = Cache([NS])
    cache.replace(Kind.JOBS, NS, [job_doc("blast-1", app="blast", job_id="s1", finished=True)])
    assert cache.snapshot(NS).batch_work_ids == {"s1"}  # a failed one stays in view
    assert cache.snapshot(NS).unfinished == ()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("blast-2", app="blast", job_id="s2"))
    cache.apply(Kind.JOBS, NS, "DELETED", job_doc("blast-2", app="blast", job_id="s2"))
    snap = cache.snapshot(NS)
    assert snap.batch_work_ids == {"s1", "s2"} and snap.unfinished == ()
    assert snap.batch_work["s2"] == "blast/blast-2"
    cache.replace(Kind.JOBS, NS, [])  # a relist knows only what it lists (and what is looked up)
    assert cache.snapshot(NS).batch_work_ids == frozenset()
    cache.apply(Kind.JOBS, NS, "DELETED", job_doc("fin-1", app="finalizer", job_id="s3"))
    assert cache.snapshot(NS).batch_work_ids == frozenset()  # a finalizer is not batch work


def test_a_marked_job_that_leaves_the_live_watch_is_kept_to_be_unmarked() -> None:
    cache = synced_cache()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("f1", orphaned_since=ago(5), rv="7"))
    cache.apply(Kind.JOBS, NS, "DELETED", job_doc("f1", orphaned_since=ago(5), rv="8"))
    snap = cache.snapshot(NS)
    assert snap.unfinished == () and [j.name for j in snap.finished_marked] == ["f1"]
    cache.forget_job(NS, "f1", "8")  # the un-mark found it deleted (404)
    assert cache.snapshot(NS).finished_marked == ()


def test_only_live_finalizers_that_nothing_vouches_for_are_looked_up_once_per_relist() -> None:
    cache = synced_cache()
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("f1", job_id="s1"))
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("f2", job_id="s2"))
    cache.apply(Kind.JOBS, NS, "ADDED", job_doc("b2", app="blast", job_id="s2"))
    cache.apply(
        Kind.JOBS,
        NS,
        "ADDED",
        job_doc("f3", job_id="s3", batch_work_seen="2026-01-01T00:00:00.000000Z blast/b3"),
    )
    assert cache.lookups_wanted(NS) == ["s1"]
    epoch = cache.jobs_epoch(NS)
    cache.looked_up(NS, "s1", "")
    assert cache.lookups_wanted(NS) == [] and "s1" not in cache.snapshot(NS).batch_work_ids
    cache.replace(Kind.JOBS, NS, [job_doc("f1", job_id="s1")])
    assert cache.jobs_epoch(NS) == epoch + 1 and cache.lookups_wanted(NS) == ["s1"]
    cache.looked_up(NS, "s1", "submit/submit-jobs-s1")
    snap = cache.snapshot(NS)
    assert "s1" in snap.batch_work_ids and snap.batch_work["s1"] == "submit/submit-jobs-s1"
