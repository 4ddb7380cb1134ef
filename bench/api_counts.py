"""API server requests, as counted by a proxy in front of the API server. Pure.

Each component whose load is measured reaches the API server through a
:class:`testbed.faultproxy.FaultProxy` of its own (no faults added: it only forwards
and records ``(method, path?query)``), so every request is attributed to exactly one
component. :func:`tally` sorts a slice of those records into reads (GET, LIST), watches
(a GET with ``watch=1``: one long-running request, however many events it carries) and
writes (POST, PUT, PATCH, DELETE), per resource.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from elbgate.names import ADMISSION_READY_LEASE, CENSUS_FENCE_APP

_PATH = re.compile(
    r"^/(?:api/v1|apis/[^/]+/[^/]+)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
KINDS = ("read", "watch", "write")


def classify(method: str, path_qs: str) -> tuple[str, str]:
    """``(kind, resource)`` of one request: kind in :data:`KINDS` (``other`` for
    discovery and anything that names no resource), resource the plural (``jobs``),
    with ``/<sub>`` for a subresource (``jobs/status``) and ``list`` for a collection
    GET (``jobs:list``)."""
    parts = urlsplit(path_qs)
    match = _PATH.match(parts.path)
    if match is None:
        return "other", parts.path
    resource = match.group("resource")
    name, sub = match.group("name"), match.group("sub")
    if sub:
        resource = f"{resource}/{sub}"
    query = parse_qs(parts.query)
    method = method.upper()
    if method == "GET":
        if query.get("watch", [""])[0] in ("1", "true"):
            return "watch", resource
        return "read", resource if name else f"{resource}:list"
    if method in ("POST", "PUT", "PATCH", "DELETE"):
        return "write", resource
    return "other", resource


@dataclass
class Tally:
    """Requests by kind and resource."""

    by: Counter[tuple[str, str]] = field(default_factory=Counter)

    def total(self, kind: str | None = None) -> int:
        return sum(n for (k, _r), n in self.by.items() if kind is None or k == kind)

    def per(self, divisor: float) -> dict[str, float]:
        """Totals per unit (search, renewal, resync): reads, watches, writes, all."""
        if divisor <= 0:
            return {k: float("nan") for k in (*KINDS, "all")}
        out = {k: self.total(k) / divisor for k in KINDS}
        out["all"] = sum(out.values())
        return out

    def detail(self) -> dict[str, int]:
        """``"write jobs": 4``-style keys, sorted (for results.json and the docs)."""
        return {f"{k} {r}": n for (k, r), n in sorted(self.by.items())}

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.by + other.by)


def is_readiness_key(path_qs: str) -> bool:
    """A request for a webhook replica's readiness key (the Lease ``elb-gate-admission``
    it renews every few seconds per gated namespace on its own clock)."""
    return urlsplit(path_qs).path.endswith(f"/leases/{ADMISSION_READY_LEASE}")


def is_census_watch(method: str, path_qs: str) -> bool:
    """A webhook replica's census watch listing or watching a namespace's Jobs (its
    selector names the census fence's ``app``): started once per namespace, resumed when
    the API server ends a watch, on the replica's own clock. The fence write each census
    read makes (a PATCH of the fence Job) is not one of these."""
    parts = urlsplit(path_qs)
    selector = " ".join(parse_qs(parts.query).get("labelSelector", []))
    return method.upper() == "GET" and CENSUS_FENCE_APP in selector


def on_own_clock(method: str, path_qs: str) -> bool:
    """A request a webhook replica makes on its own clock, not per review, search,
    renewal or resync (so whether one falls inside a measured window is chance): its
    readiness key's renewals and its census watch."""
    return is_readiness_key(path_qs) or is_census_watch(method, path_qs)


def tally(requests: Iterable[tuple[str, str]]) -> Tally:
    """Count ``(method, path?query)`` records, other than discovery and other than what
    a replica does on its own clock (:func:`on_own_clock`)."""
    out: Counter[tuple[str, str]] = Counter()
    for method, path_qs in requests:
        if on_own_clock(method, path_qs):
            continue
        kind, resource = classify(method, path_qs)
        if kind != "other":
            out[(kind, resource)] += 1
    return Tally(out)


def combined(tallies: Mapping[str, Tally]) -> Tally:
    total = Tally()
    for t in tallies.values():
        total = total + t
    return total
