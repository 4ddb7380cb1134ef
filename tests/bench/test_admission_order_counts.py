"""The admission-order bench counts what a review costs, not the replica's clock."""

from __future__ import annotations

from bench.admission_order import _is_readiness_key


def test_the_readiness_key_is_told_apart_from_the_submit_lease() -> None:
    assert _is_readiness_key(
        "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-gate-admission"
    )
    assert _is_readiness_key(
        "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-gate-admission?fieldManager=x"
    )
    assert not _is_readiness_key(
        "/apis/coordination.k8s.io/v1/namespaces/ns-a/leases/elb-blast-submit-ns-a"
    )
    assert not _is_readiness_key("/apis/batch/v1/namespaces/ns-a/jobs?labelSelector=app%3Dblast")
