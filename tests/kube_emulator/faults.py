"""Fault injection on the HTTP layer: an error Status, a delay, or a dropped connection."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestInfo:
    """What a fault can match on."""

    method: str
    resource: str | None  # plural, None for non-resource paths (discovery, /version)
    namespace: str | None
    name: str | None
    watch: bool


class Fault:
    """One injected fault. `count=None` fires forever; `.hits` counts the requests it hit."""

    def __init__(self, owner: Faults, method: str | None, resource: str | None,
                 namespace: str | None, name: str | None, status: int | None, delay: float,
                 drop: bool, count: int | None, watch: bool | None) -> None:
        self._owner = owner
        self.method = method.upper() if method else None
        self.resource, self.namespace, self.name = resource, namespace, name
        self.status, self.delay, self.drop = status, delay, drop
        self.remaining, self.watch = count, watch
        self.hits = 0

    def matches(self, req: RequestInfo) -> bool:
        return ((self.method is None or self.method == req.method)
                and (self.resource is None or self.resource == req.resource)
                and (self.namespace is None or self.namespace == req.namespace)
                and (self.name is None or self.name == req.name)
                and (self.watch is None or self.watch == req.watch))

    def remove(self) -> None:
        self._owner.remove(self)


class Faults:
    """The set of active faults; thread-safe (tests add them from their own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, method: str | None = None, resource: str | None = None,
            namespace: str | None = None, name: str | None = None, status: int | None = 500,
            delay: float = 0.0, drop: bool = False, count: int | None = 1,
            watch: bool | None = None) -> Fault:
        """Add a fault; None matches anything. The first matching fault (in insertion order)
        fires: after `delay` seconds it drops the connection, or answers `status` with a Status
        body (429 with Retry-After), or (status None) lets the request through.
        """
        fault = Fault(self, method, resource, namespace, name, status, delay, drop, count, watch)
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, req: RequestInfo) -> Fault | None:
        """The fault that fires for `req`, counting the hit (and retiring spent faults)."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(req):
                    fault.hits += 1
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining <= 0:
                            self._faults.remove(fault)
                    return fault
        return None
