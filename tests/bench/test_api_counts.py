"""The benches count what a review, a search or a renewal costs, not the replica's clock."""

from __future__ import annotations

from bench.api_counts import is_readiness_key, tally


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
