"""The stamp's hand-built JSON Patch does what the generic diff it replaced did.

The oracle is the stamp's former patch generation, kept here only: apply the
stamps to a deep copy of the Lease and ``jsonpatch.make_patch`` the two. For any
Lease, old Lease and requester, applying either patch must give the same object.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elbgate.lease import format_microtime
from elbgate.names import HOLDER_POD_ANNOTATION, HOLDER_USER_ANNOTATION
from tests.builders import NOW, admission, lease, user
from webhook import lease_stamp
from webhook.lease_request import LeaseRequest
from webhook.review import UserInfo

NAME = "elb-blast-submit-default"
HOLDERS = st.sampled_from(["", "openapi-a", "dashboard-b", "cli-c"])
TEXT = st.text(alphabet="ab/~-.:", max_size=6)
TIMES = st.sampled_from(
    ["2020-01-01T00:00:00.000000Z", format_microtime(NOW), "garbage", "", 7, None]
)
ANNOTATION_KEYS = st.sampled_from(
    [HOLDER_USER_ANNOTATION, HOLDER_POD_ANNOTATION, "other.io/x", "a~b", "a/b~1", ""]
)
ANNOTATION_VALUES = st.sampled_from(["alice", "bob", "blast/p/u", "", "x/y~z"])


_ABSENT = object()


def _absent_or(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(_ABSENT), value)


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value is not _ABSENT:
        target[key] = value


@st.composite
def lease_objects(draw: st.DrawFn) -> dict[str, Any]:
    """Leases as clients send them: stamps present or not, null or missing maps,
    foreign annotations, keys that need JSON-pointer escaping, odd times."""
    obj: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
    if draw(st.integers(0, 9)):  # 1 in 10 without metadata at all
        meta: dict[str, Any] = {"name": NAME, "namespace": "default"}
        annotations = draw(
            _absent_or(
                st.one_of(
                    st.none(),
                    st.dictionaries(ANNOTATION_KEYS, ANNOTATION_VALUES, max_size=4),
                )
            )
        )
        _put(meta, "annotations", annotations)
        _put(meta, "labels", draw(_absent_or(st.dictionaries(TEXT, TEXT, max_size=2))))
        obj["metadata"] = meta
    spec: dict[str, Any] = {}
    _put(spec, "holderIdentity", draw(_absent_or(HOLDERS)))
    _put(spec, "renewTime", draw(_absent_or(TIMES)))
    _put(spec, "acquireTime", draw(_absent_or(TIMES)))
    _put(spec, "leaseDurationSeconds", draw(_absent_or(st.sampled_from([15, 900]))))
    if draw(st.booleans()) or spec.get("holderIdentity"):
        obj["spec"] = spec
    return obj


@st.composite
def requesters(draw: st.DrawFn) -> UserInfo:
    return user(
        draw(st.sampled_from(["alice", "bob", "system:serviceaccount:blast:elb-openapi"])),
        pod=draw(st.sampled_from(["", "elb-openapi-7f9c"])),
        pod_uid=draw(st.sampled_from(["", "3f1d-uid"])),
    )


def diff_patch(request: LeaseRequest) -> list[dict[str, Any]]:
    """The former implementation: stamp a deep copy, then diff it against the request."""
    assert request.obj is not None and request.new is not None
    holder = request.new.holder
    stamps = lease_stamp.expected_stamps(request.old, holder, request.requester)
    desired = copy.deepcopy(dict(request.obj))
    meta = desired.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    for key, value in ((HOLDER_USER_ANNOTATION, stamps.user), (HOLDER_POD_ANNOTATION, stamps.pod)):
        if value:
            annotations[key] = value
        else:
            annotations.pop(key, None)
    if annotations or "annotations" in meta:
        meta["annotations"] = annotations
    changed_holder = request.old is None or request.old.holder != holder
    if holder:
        spec = desired.setdefault("spec", {})
        stamp_time = format_microtime(NOW)
        spec["renewTime"] = stamp_time
        if changed_holder:
            spec["acquireTime"] = stamp_time
        elif request.old is not None and request.old.holder_user:
            # A renew keeps the stamped acquisition time (docs/design.md, Gate A).
            if isinstance(request.old.acquire_time, datetime):
                spec["acquireTime"] = format_microtime(request.old.acquire_time)
    return list(jsonpatch.make_patch(dict(request.obj), desired).patch)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    new=lease_objects(),
    old=st.one_of(st.none(), lease_objects()),
    who=requesters(),
    operation=st.sampled_from(["CREATE", "UPDATE"]),
)
def test_the_built_patch_gives_what_the_diff_gave(
    new: dict[str, Any], old: dict[str, Any] | None, who: UserInfo, operation: str
) -> None:
    before = copy.deepcopy(new)
    request = LeaseRequest.from_admission(
        admission(operation, new, old, who=who, resource="leases", name=NAME)
    )
    decision = lease_stamp.decide(request, NOW)
    assert new == before, "deciding must not touch the request's object"
    expected = jsonpatch.apply_patch(new, diff_patch(request))
    assert jsonpatch.apply_patch(new, list(decision.patch)) == expected
    assert bool(decision.patch) == (expected != new), "no patch exactly when nothing changes"


@given(holder=HOLDERS.filter(bool), who=requesters())
def test_a_lease_without_metadata_gets_it_as_the_diff_added_it(holder: str, who: UserInfo) -> None:
    new: dict[str, Any] = {"spec": {"holderIdentity": holder}}
    request = LeaseRequest.from_admission(
        admission("CREATE", new, None, who=who, resource="leases", name=NAME)
    )
    decision = lease_stamp.decide(request, NOW)
    expected = jsonpatch.apply_patch(new, diff_patch(request))
    assert jsonpatch.apply_patch(new, list(decision.patch)) == expected


def test_annotation_keys_are_escaped_as_json_pointers() -> None:
    request = LeaseRequest.from_admission(
        admission(
            "CREATE",
            lease("openapi-a", holder_user="bob"),
            None,
            who=user("alice"),
            resource="leases",
        )
    )
    paths = {op["path"] for op in lease_stamp.decide(request, NOW).patch}
    assert "/metadata/annotations/elb-gate.io~1holder-user" in paths
