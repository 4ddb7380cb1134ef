"""Thread-safe object storage: one global resourceVersion, a bounded watch history, observers."""

from __future__ import annotations

import copy
import logging
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import errors
from .resources import Obj, ResourceType, by_plural
from .selectors import FieldRequirement, LabelMatcher, field_matches

log = logging.getLogger(__name__)

Key = tuple[str, str, str, str]  # (group, plural, namespace, name)
Scope = tuple[str, str, str]  # (group, plural, namespace): what one namespaced LIST reads
Subscriber = Callable[[str, str, Obj], None]
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand alphabet


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
    return (rt.group, rt.plural, namespace or "" if rt.namespaced else "", name)


@dataclass(frozen=True)
class Event:
    """A committed write, as watchers see it."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    rt: ResourceType
    obj: Obj
    old: Obj | None


Watcher = Callable[[Event], None]


class Store:
    """All objects of the emulated cluster. Every public method is atomic."""

    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.RLock()
        self._objects: dict[Key, Obj] = {}
        # The same objects by scope, so a LIST reads its namespace only; names kept
        # sorted per scope until the set of names changes. Stored objects are never
        # changed in place (every write stores a new dict), so readers may share them.
        self._scopes: dict[Scope, dict[str, Obj]] = {}
        self._sorted_names: dict[Scope, list[str]] = {}
        self._rv = 0
        self._history: deque[Event] = deque()
        self._history_size = history
        self._floor = 0  # events with rv > floor are all in _history
        self._watchers: list[Watcher] = []
        self._subscribers: list[Subscriber] = []
        self.subscriber_errors: list[BaseException] = []

    # -- reads ---------------------------------------------------------------

    @property
    def floor(self) -> int:
        """Every event after this RV is still in the watch history."""
        with self.lock:
            return self._floor

    @property
    def resource_version(self) -> str:
        with self.lock:
            return str(self._rv)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.lock:
            obj = self._objects.get(_key(rt, namespace, name))
            if obj is None:
                raise errors.not_found(rt, name)
            return copy.deepcopy(obj)

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.get(rt, namespace, name)
        except errors.ApiError:
            return None

    def select(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelMatcher | None = None,
        fields: list[FieldRequirement] | None = None,
        *,
        shared: bool = False,
    ) -> tuple[list[Obj], str]:
        """Matching objects sorted by namespace/name, and the list's resourceVersion.

        Copies, unless ``shared``: then the stored objects themselves, for a caller
        that only serialises them and must never change them (a LIST answer)."""
        with self.lock:
            items = [
                obj if shared else copy.deepcopy(obj)
                for obj in self._in_order(rt, namespace)
                if selected(rt, obj, labels, fields)
            ]
            return items, str(self._rv)

    def _in_order(self, rt: ResourceType, namespace: str | None) -> list[Obj]:
        """The stored objects of ``rt`` (in ``namespace`` unless None), by namespace/name."""
        if namespace is not None:
            scopes = [(rt.group, rt.plural, namespace)]
        else:
            scopes = sorted(s for s in self._scopes if s[:2] == (rt.group, rt.plural))
        found: list[Obj] = []
        for scope in scopes:
            objects = self._scopes.get(scope)
            if not objects:
                continue
            names = self._sorted_names.get(scope)
            if names is None:
                names = self._sorted_names[scope] = sorted(objects)
            found.extend(objects[name] for name in names)
        return found

    # -- writes --------------------------------------------------------------

    def prepare_create(self, rt: ResourceType, obj: Obj) -> Obj:
        """BeforeCreate: name from generateName, uid, creationTimestamp, kind/apiVersion."""
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.setdefault("metadata", {})
        if not rt.namespaced:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choice(_NAME_CHARS) for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        if not meta.get("name"):
            raise errors.invalid(rt, "", "metadata.name",
                                 "Required value: name or generateName is required")
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        for transient in ("resourceVersion", "deletionTimestamp", "selfLink"):
            meta.pop(transient, None)
        if rt.generation:
            meta["generation"] = 1
        if rt.plural == "namespaces":
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        return obj

    def commit_create(self, rt: ResourceType, obj: Obj) -> Obj:
        with self.lock:
            meta = obj["metadata"]
            ns = meta.get("namespace") if rt.namespaced else None
            if rt.namespaced:
                self.require_namespace(ns or "")
            key = _key(rt, ns, meta["name"])
            if key in self._objects:
                raise errors.already_exists(rt, meta["name"])
            stored = copy.deepcopy(obj)
            self._commit("ADDED", rt, key, stored, None)
            return copy.deepcopy(stored)

    def create(self, rt: ResourceType, obj: Obj) -> Obj:
        return self.commit_create(rt, self.prepare_create(rt, obj))

    def require_namespace(self, namespace: str) -> None:
        if _key(by_plural("namespaces"), None, namespace) not in self._objects:
            raise errors.not_found(by_plural("namespaces"), namespace)

    def prepare_update(self, rt: ResourceType, old: Obj, new: Obj, subresource: str = "") -> Obj:
        """PrepareForUpdate: immutable metadata kept; status only via the status subresource."""
        new = copy.deepcopy(new)
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        if subresource == "status":
            # ResetObjectMetaForStatus + spec kept: only status changes.
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status", {})
            merged["metadata"]["resourceVersion"] = new.get("metadata", {}).get(
                "resourceVersion", old["metadata"].get("resourceVersion"))
            return merged
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        for fixed in ("uid", "creationTimestamp", "name", "deletionTimestamp", "generation"):
            if fixed in old_meta:
                meta[fixed] = old_meta[fixed]
            else:
                meta.pop(fixed, None)
        if rt.namespaced:
            meta["namespace"] = old_meta.get("namespace")
        if rt.status_subresource:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        if rt.generation:
            spec_keys = [k for k in set(new) | set(old) if k not in ("metadata", "status")]
            if any(new.get(k) != old.get(k) for k in spec_keys):
                meta["generation"] = int(old_meta.get("generation") or 1) + 1
        return new

    def commit_update(self, rt: ResourceType, new: Obj, expected_rv: str | None) -> Obj:
        """Store `new` if the stored object still has `expected_rv` (None: unconditional)."""
        with self.lock:
            meta = new["metadata"]
            key = _key(rt, meta.get("namespace"), meta["name"])
            old = self._objects.get(key)
            if old is None:
                raise errors.not_found(rt, meta["name"])
            if expected_rv and expected_rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rt, meta["name"])
            stored = copy.deepcopy(new)
            stored["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if stored == old:  # the apiserver skips no-op writes: no new RV, no event
                return copy.deepcopy(old)
            if old["metadata"].get("deletionTimestamp") and not stored["metadata"].get(
                "finalizers"
            ):
                self._commit("DELETED", rt, key, stored, old)
                return copy.deepcopy(stored)
            self._commit("MODIFIED", rt, key, stored, old)
            return copy.deepcopy(stored)

    def update(self, rt: ResourceType, obj: Obj, subresource: str = "") -> Obj:
        meta = obj.get("metadata") or {}
        old = self.get(rt, meta.get("namespace"), meta.get("name", ""))
        new = self.prepare_update(rt, old, obj, subresource)
        return self.commit_update(rt, new, meta.get("resourceVersion") or None)

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        preconditions: dict[str, Any] | None = None,
    ) -> tuple[Obj, bool]:
        """Delete (or, with finalizers, mark deleted). Returns (object, gone)."""
        with self.lock:
            key = _key(rt, namespace, name)
            old = self._objects.get(key)
            if old is None:
                raise errors.not_found(rt, name)
            meta = old["metadata"]
            self.check_preconditions(rt, old, preconditions)
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return copy.deepcopy(old), False
                marked = copy.deepcopy(old)
                marked["metadata"]["deletionTimestamp"] = now_rfc3339()
                marked["metadata"]["deletionGracePeriodSeconds"] = 0
                self._commit("MODIFIED", rt, key, marked, old)
                return copy.deepcopy(marked), False
            if rt.plural == "namespaces":
                for other in [k for k in self._objects if k[2] == name and k[1] != "namespaces"]:
                    ort = next(r for r in _namespaced_types() if (r.group, r.plural) == other[:2])
                    self._commit("DELETED", ort, other, copy.deepcopy(self._objects[other]),
                                 self._objects[other])
            gone = copy.deepcopy(old)
            self._commit("DELETED", rt, key, gone, old)
            return copy.deepcopy(gone), True

    @staticmethod
    def check_preconditions(rt: ResourceType, obj: Obj, preconditions: dict[str, Any] | None
                            ) -> None:
        """DeleteOptions.preconditions: a mismatch is a 409 Conflict."""
        meta, pre = obj["metadata"], preconditions or {}
        name = meta["name"]
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise errors.conflict(rt, name, f"Precondition failed: UID in precondition: "
                                  f"{pre['uid']}, UID in object meta: {meta.get('uid')}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict(
                rt, name, f"Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}")

    def _commit(self, kind: str, rt: ResourceType, key: Key, obj: Obj, old: Obj | None) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        scope, name = key[:3], key[3]
        if kind == "DELETED":
            self._objects.pop(key, None)
            objects = self._scopes.get(scope)
            if objects is not None and objects.pop(name, None) is not None:
                self._sorted_names.pop(scope, None)
                if not objects:
                    del self._scopes[scope]
        else:
            self._objects[key] = obj
            objects = self._scopes.setdefault(scope, {})
            if name not in objects:
                self._sorted_names.pop(scope, None)
            objects[name] = obj
        event = Event(self._rv, kind, rt, copy.deepcopy(obj), copy.deepcopy(old) if old else None)
        self._history.append(event)
        while len(self._history) > self._history_size:
            self._floor = self._history.popleft().rv
        for watcher in list(self._watchers):
            watcher(event)
        for fn in list(self._subscribers):
            try:
                fn(kind, rt.plural, copy.deepcopy(obj))
            except Exception as exc:  # an observer must never break a write
                log.exception("subscriber failed")
                self.subscriber_errors.append(exc)

    # -- watch ---------------------------------------------------------------

    def watch(
        self, rt: ResourceType, namespace: str | None, since: str | None, watcher: Watcher
    ) -> tuple[list[Event], Callable[[], None]]:
        """Register `watcher`; returns the events to send first and an unregister function.

        `since` None or "0": synthetic ADDED for the current state. Otherwise the kept
        history after that RV, or a 410 Expired when it is older than the history.
        """
        with self.lock:
            if since in (None, "", "0"):
                first = [
                    Event(self._rv, "ADDED", rt, copy.deepcopy(obj), None)
                    for obj in self._in_order(rt, namespace)
                ]
            else:
                try:
                    since_rv = int(since or 0)
                except ValueError:
                    raise errors.bad_request(f'invalid resource version "{since}"') from None
                if since_rv < self._floor:
                    raise errors.expired(f"too old resource version: {since_rv} ({self._floor})")
                first = [
                    e for e in self._history
                    if e.rv > since_rv and e.rt == rt
                    and (namespace is None or e.obj["metadata"].get("namespace") == namespace)
                ]
            self._watchers.append(watcher)

            def stop() -> None:
                with self.lock:
                    if watcher in self._watchers:
                        self._watchers.remove(watcher)

            return first, stop

    def compact(self) -> None:
        """Forget the watch history: a watch from any older RV now gets 410 Expired."""
        with self.lock:
            self._history.clear()
            self._floor = self._rv

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        with self.lock:
            self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None


def selected(
    rt: ResourceType,
    obj: Obj,
    labels: LabelMatcher | None,
    fields: list[FieldRequirement] | None,
) -> bool:
    meta = obj.get("metadata") or {}
    if labels is not None and not labels(meta.get("labels") or {}):
        return False
    return not fields or field_matches(fields, lambda label: rt.field_value(obj, label))


def _namespaced_types() -> list[ResourceType]:
    from .resources import RESOURCES

    return [r for r in RESOURCES if r.namespaced]
