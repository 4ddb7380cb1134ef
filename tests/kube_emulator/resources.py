"""The resource types the emulator serves, with the facts discovery and storage need."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
FieldGetter = Callable[[Obj], str]

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _path(*keys: str, default: str = "") -> FieldGetter:
    def get(obj: Obj) -> str:
        cur: Any = obj
        for key in keys:
            if not isinstance(cur, dict) or key not in cur:
                return default
            cur = cur[key]
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


@dataclass(frozen=True)
class ResourceType:
    """One REST resource (group/version/plural) and how the apiserver treats it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    # Types whose strategy sets metadata.generation (bumped on spec changes).
    generation: bool = False
    # Field-selector labels beyond metadata.name / metadata.namespace.
    fields: dict[str, FieldGetter] = field(default_factory=dict, hash=False, compare=False)
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`leases.coordination.k8s.io`, or `configmaps` for the core group."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def field_value(self, obj: Obj, label: str) -> str | None:
        """The value of a selectable field, or None when the label is not supported."""
        meta = obj.get("metadata") or {}
        if label == "metadata.name":
            return str(meta.get("name", ""))
        if label == "metadata.namespace" and self.namespaced:
            return str(meta.get("namespace", ""))
        getter = self.fields.get(label)
        return getter(obj) if getter else None


def _succeeded(obj: Obj) -> str:
    # The apiserver selects on strconv.Itoa(int(job.Status.Succeeded)): absent is "0".
    return str(int((obj.get("status") or {}).get("succeeded") or 0))


_EVENT_FIELDS: dict[str, FieldGetter] = {
    **{f"involvedObject.{k}": _path("involvedObject", k) for k in
       ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": _path("reason"),
    "reportingComponent": _path("reportingComponent"),
    "source": _path("source", "component"),
    "type": _path("type"),
}

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",), status_subresource=True,
                 fields={"status.phase": _path("status", "phase")}),
    ResourceType("", "v1", "pods", "Pod", True, ("po",), status_subresource=True,
                 fields={"spec.nodeName": _path("spec", "nodeName"),
                         "spec.restartPolicy": _path("spec", "restartPolicy"),
                         "spec.schedulerName": _path("spec", "schedulerName"),
                         "spec.serviceAccountName": _path("spec", "serviceAccountName"),
                         "status.phase": _path("status", "phase"),
                         "status.podIP": _path("status", "podIP")},
                 categories=("all",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True, (), fields={"type": _path("type")}),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    ResourceType("", "v1", "services", "Service", True, ("svc",), status_subresource=True,
                 categories=("all",)),
    ResourceType("", "v1", "events", "Event", True, ("ev",), fields=_EVENT_FIELDS),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType("batch", "v1", "jobs", "Job", True, (), status_subresource=True, generation=True,
                 fields={"status.successful": _succeeded}, categories=("all",)),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, ("ev",), fields=_EVENT_FIELDS),
    ResourceType("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                 "ValidatingWebhookConfiguration", False, (), generation=True,
                 categories=("api-extensions",)),
    ResourceType("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                 "MutatingWebhookConfiguration", False, (), generation=True,
                 categories=("api-extensions",)),
)

_BY_GVR = {(r.group, r.version, r.plural): r for r in RESOURCES}


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_GVR.get((group, version, plural))


def by_plural(plural: str) -> ResourceType:
    """The resource for a plural name, as the test helpers use it (`"leases"`, `"jobs"`)."""
    if "." in plural:
        name, group = plural.split(".", 1)
        matches = [r for r in RESOURCES if r.plural == name and r.group == group]
    else:
        matches = [r for r in RESOURCES if r.plural == plural]
    if not matches:
        raise KeyError(f"unknown resource {plural!r}")
    return matches[0]


def for_object(obj: Obj) -> ResourceType:
    """The resource an object's apiVersion/kind belongs to."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    group, _, version = api_version.rpartition("/")
    for r in RESOURCES:
        if r.group == group and r.version == version and r.kind == kind:
            return r
    raise KeyError(f"unknown kind {api_version} {kind}")


def group_versions() -> dict[str, list[str]]:
    """Served groups in discovery order, each with its versions."""
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        versions = out.setdefault(r.group, [])
        if r.version not in versions:
            versions.append(r.version)
    return out
