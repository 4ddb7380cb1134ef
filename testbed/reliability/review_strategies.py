"""Hypothesis strategies for AdmissionReviews: well-formed, malformed and hostile.

Shared by the bad-input properties and the fuzzer's seed corpus. The oracles say
when a request *opens or finalizes a search* (Gate A applies) and when it writes a
live Lease held by someone else, independently of the webhook's own code.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from elbgate.lease import format_microtime
from elbgate.names import (
    APP_LABEL,
    HOLDER_POD_ANNOTATION,
    HOLDER_USER_ANNOTATION,
    JOB_ID_LABEL,
    SEARCH_APPS,
    lease_name,
)
from testbed.controller_process import CONTROLLER_USER

GATED_NS = "bad-input-gated"
FREE_NS = "bad-input-free"
HOLDER_USER = "alice"
HOLDER = "openapi-0f1e2d3c4b5a69788796a5b4c3d2e1f0"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "", " ", "alice ", "Alice", "ALICE", "alice\x00", "\u0430lice", "system:masters",
            CONTROLLER_USER + " ", CONTROLLER_USER + "\n",
            "a" * 5000, "../../etc/passwd", "${jndi:ldap://x}", "' OR 1=1 --", "\u202ealice",
        ]
    ),
)  # fmt: skip
app_values = st.one_of(
    st.sampled_from(
        [*SEARCH_APPS, "Finalizer", "finalizer ", "fin\u0430lizer", "blast\x00", "", "x"]
    ),
    st.text(max_size=12),
    json_values,
)
job_ids = st.one_of(st.text(max_size=40), st.sampled_from(["", " ", "\t", "a" * 300]), json_values)


any_labels = st.one_of(
    st.fixed_dictionaries({APP_LABEL: app_values}, optional={JOB_ID_LABEL: job_ids}),
    st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    json_values,
)


def job_object(labels: st.SearchStrategy[Any] = any_labels) -> st.SearchStrategy[Any]:
    meta = st.fixed_dictionaries(
        {"labels": labels},
        optional={
            "name": hostile_text,
            "namespace": hostile_text,
            "generateName": hostile_text,
            "annotations": json_values,
            "creationTimestamp": st.one_of(hostile_text, json_values),
        },
    )
    return st.one_of(
        st.fixed_dictionaries(
            {"apiVersion": st.just("batch/v1"), "kind": st.just("Job"), "metadata": meta},
            optional={"spec": json_values, "status": json_values},
        ),
        json_values,
    )


user_infos = st.one_of(
    st.none(),
    json_values,
    st.fixed_dictionaries(
        {"username": st.one_of(hostile_text, json_values)},
        optional={
            "uid": st.one_of(hostile_text, json_values),
            "groups": st.one_of(st.lists(hostile_text, max_size=30), json_values),
            "extra": st.one_of(
                st.dictionaries(hostile_text, st.lists(hostile_text, max_size=3), max_size=3),
                json_values,
            ),
        },
    ),
)
any_request = st.fixed_dictionaries(
    {},
    optional={
        "uid": st.one_of(hostile_text, json_values),
        "operation": st.one_of(
            st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "create", ""]), json_values
        ),
        "namespace": st.one_of(st.sampled_from([GATED_NS, FREE_NS]), hostile_text),
        "name": hostile_text,
        "object": job_object(),
        "oldObject": job_object(),
        "userInfo": user_infos,
        "resource": st.one_of(
            st.just({"group": "batch", "version": "v1", "resource": "jobs"}), json_values
        ),
        "subResource": hostile_text,
        "dryRun": json_values,
    },
)
NEVER: st.SearchStrategy[Any] = st.nothing()


def _review(
    request: st.SearchStrategy[Any],
    odd: st.SearchStrategy[Any] = NEVER,
    response: st.SearchStrategy[Any] = NEVER,
) -> st.SearchStrategy[dict[str, Any]]:
    """An AdmissionReview of ``request``: its apiVersion and kind right, or ``odd``; with a
    ``response`` at times (:data:`NEVER`: never)."""
    return st.fixed_dictionaries(
        {
            "apiVersion": st.just("admission.k8s.io/v1") | odd,
            "kind": st.just("AdmissionReview") | odd,
            "request": request,
        },
        optional={"response": response},
    )


any_review = _review(any_request, hostile_text, json_values) | json_values


def gated_job_review() -> st.SearchStrategy[dict[str, Any]]:
    """CREATE/UPDATE of a search Job in a namespace where alice holds the Lease (or where
    nobody does), by anyone but alice: never to be admitted."""
    labels = st.fixed_dictionaries(
        {APP_LABEL: st.sampled_from(SEARCH_APPS)}, optional={JOB_ID_LABEL: job_ids}
    )
    request = st.fixed_dictionaries(
        {
            "uid": st.text(min_size=1, max_size=36),
            "operation": st.sampled_from(["CREATE", "UPDATE"]),
            "namespace": st.sampled_from([GATED_NS, FREE_NS]),
            "object": job_object(labels),
            "userInfo": user_infos,
        },
        optional={"oldObject": st.one_of(st.none(), job_object()), "name": hostile_text},
    )
    return _review(request)


def live_lease(now: datetime | None = None) -> dict[str, Any]:
    """alice's Lease in GATED_NS, renewed just now for an hour, stamped by elb-gate."""
    stamp = format_microtime(now or datetime.now(UTC))
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": lease_name(GATED_NS),
            "namespace": GATED_NS,
            "resourceVersion": "42",
            "annotations": {HOLDER_USER_ANNOTATION: HOLDER_USER},
        },
        "spec": {
            "holderIdentity": HOLDER,
            "leaseDurationSeconds": 3600,
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }


def lease_attack_review() -> st.SearchStrategy[dict[str, Any]]:
    """A write to alice's live Lease by someone else: renew, release, takeover, forged
    stamps, odd durations and times, or a delete."""
    old = live_lease()
    holders = st.one_of(st.sampled_from([HOLDER, "", "dashboard-" + "a" * 32]), hostile_text)
    annotations = st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {}, optional={HOLDER_USER_ANNOTATION: hostile_text, HOLDER_POD_ANNOTATION: hostile_text}
        ),
    )
    times = st.one_of(
        st.sampled_from([format_microtime(datetime.now(UTC) + timedelta(days=d)) for d in (1, -1)]),
        hostile_text,
        json_values,
    )

    def build(holder: Any, notes: Any, renew: Any, duration: Any) -> dict[str, Any]:
        return {
            **old,
            "metadata": {**old["metadata"], "annotations": notes},
            "spec": {
                **old["spec"],
                "holderIdentity": holder,
                "renewTime": renew,
                "leaseDurationSeconds": duration,
            },
        }

    new_lease = st.builds(build, holders, annotations, times, st.one_of(st.integers(), json_values))
    user = st.one_of(hostile_text, st.just("bob")).filter(
        lambda u: u not in (HOLDER_USER, CONTROLLER_USER)
    )
    request = st.fixed_dictionaries(
        {
            "uid": st.text(min_size=1, max_size=36),
            "operation": st.sampled_from(["UPDATE", "DELETE"]),
            "namespace": st.just(GATED_NS),
            "name": st.just(lease_name(GATED_NS)),
            "object": new_lease,
            "oldObject": st.just(old),
            "userInfo": st.fixed_dictionaries(
                {"username": user}, optional={"groups": st.lists(hostile_text, max_size=5)}
            ),
        }
    )
    return _review(request)


def _label(obj: Any, key: str) -> str | None:
    """A label's value ("" when absent); None when it is not a string, which the
    apiserver's decoding refuses before admission (no claim is made about those)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(key) if isinstance(labels, Mapping) else None
    if value is None:
        return ""
    return value if isinstance(value, str) else None


def opens_or_finalizes_search(request: Mapping[str, Any]) -> bool:
    """Gate A applies (docs/design.md, "Gate A", written independently of the webhook):
    a CREATE or an UPDATE that makes a Job a search Job or moves it to another search."""
    op, obj, old = request.get("operation"), request.get("object"), request.get("oldObject")
    if op not in ("CREATE", "UPDATE") or not isinstance(obj, Mapping):
        return False
    search = (_label(obj, APP_LABEL), _label(obj, JOB_ID_LABEL))
    if search[0] not in SEARCH_APPS or search[1] is None:
        return False
    if op == "UPDATE" and isinstance(old, Mapping):
        before = (_label(old, APP_LABEL), _label(old, JOB_ID_LABEL))
        return None not in before and search != before
    return True


def username(request: Mapping[str, Any]) -> str:
    info = request.get("userInfo")
    name = info.get("username") if isinstance(info, Mapping) else None
    return str(name or "")
