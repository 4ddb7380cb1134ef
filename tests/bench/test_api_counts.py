"""The benches count what a review, a search or a renewal costs, not the replica's clock."""

from __future__ import annotations

from bench.api_counts import is_census_watch, is_readiness_key, tally


def test_the_readiness_key_is_told_apart_from_the_submit_lease() -> None:
    assert is_readiness_key(
        "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-gate-admission"
    )
    assert is_readiness_key(
        "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-gate-admission?fieldManager=x"
    )
    assert not is_readiness_key(
        "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-blast-submit-ns-a"
    )
    assert not is_readiness_key("/apis/batch/v1/namespaces/ns-a/jobs?labelSelector=app%3Dblast")


def test_a_tally_leaves_the_readiness_key_out() -> None:
    counted = tally(
        [
            ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-gate-admission"),
            ("GET", "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-gate-admission"),
            ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-blast-submit-ns-a"),
        ]
    )
    assert counted.detail() == {"write leases": 1}


WATCHED = "app+in+%28finalizer%2Csetup%2Csubmit%2Cblast%2Celb-gate-census-fence%29"


def test_the_census_watch_is_told_apart_from_the_census_list_and_the_fence_write() -> None:
    jobs = "/apis/batch/v1/namespaces/ns-a/jobs"
    assert is_census_watch("GET", f"{jobs}?watch=true&labelSelector={WATCHED}")
    assert is_census_watch("GET", f"{jobs}?limit=500&labelSelector={WATCHED}")  # its relist
    assert not is_census_watch(
        "GET", f"{jobs}?labelSelector=app+in+%28finalizer%2Csetup%2Csubmit%2Cblast%29"
    )
    assert not is_census_watch("PATCH", f"{jobs}/elb-gate-census-fence-6f731803")


def test_a_tally_leaves_the_census_watch_out_and_counts_the_fence_write() -> None:
    jobs = "/apis/batch/v1/namespaces/ns-a/jobs"
    counted = tally(
        [
            ("GET", f"{jobs}?watch=true&labelSelector={WATCHED}"),
            ("PATCH", f"{jobs}/elb-gate-census-fence-6f731803"),
        ]
    )
    assert counted.detail() == {"write jobs": 1}
