"""What a Job's pod template says about the pods it will run: env, requests, placement.

Read from the raw Job dict (``spec.template.spec``), tolerant of anything
missing or malformed: a field that cannot be read is reported as absent, never
raised, because admission must answer for any body the API server accepted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from elbgate import quantity


def pod_spec(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """``spec.template.spec`` of a Job (``{}`` when absent)."""
    spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    inner = template.get("spec") if isinstance(template, Mapping) else None
    return inner if isinstance(inner, Mapping) else {}


def _containers(spec: Mapping[str, Any], key: str) -> Iterator[Mapping[str, Any]]:
    items = spec.get(key)
    if isinstance(items, list):
        yield from (c for c in items if isinstance(c, Mapping))


def env_values(job: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """Distinct non-empty literal values of env ``name`` over all containers and
    init containers, in order of appearance (``valueFrom`` is not resolvable here)."""
    spec = pod_spec(job)
    seen: list[str] = []
    for key in ("initContainers", "containers"):
        for container in _containers(spec, key):
            for var in container.get("env") or ():
                if not isinstance(var, Mapping) or var.get("name") != name:
                    continue
                value = var.get("value")
                if isinstance(value, str) and value.strip() and value.strip() not in seen:
                    seen.append(value.strip())
    return tuple(seen)


def node_selector(job: Mapping[str, Any]) -> dict[str, str]:
    """The pod template's ``nodeSelector`` (string values only)."""
    raw = pod_spec(job).get("nodeSelector")
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class PodRequests:
    """What one pod of the Job asks the scheduler for (``None``: nothing asked)."""

    cpu_milli: int | None
    memory_bytes: int | None

    @property
    def empty(self) -> bool:
        return self.cpu_milli is None and self.memory_bytes is None


def _request(container: Mapping[str, Any], resource: str) -> int | None:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None
    requests, limits = resources.get("requests"), resources.get("limits")
    raw = requests.get(resource) if isinstance(requests, Mapping) else None
    if raw is None and isinstance(limits, Mapping):
        raw = limits.get(resource)  # the API server defaults a missing request to the limit
    if raw is None:
        return None
    try:
        return quantity.millicores(raw) if resource == "cpu" else quantity.bytes_of(raw)
    except quantity.QuantityError:
        return None


def _effective(spec: Mapping[str, Any], resource: str) -> int | None:
    """The scheduler's effective pod request: the larger of the sum over the app
    containers (plus restartable init containers, i.e. sidecars) and the largest
    single init container."""
    total: int | None = None
    init_peak: int | None = None
    for container in _containers(spec, "containers"):
        value = _request(container, resource)
        if value is not None:
            total = (total or 0) + value
    for container in _containers(spec, "initContainers"):
        value = _request(container, resource)
        if value is None:
            continue
        if container.get("restartPolicy") == "Always":
            total = (total or 0) + value
        else:
            init_peak = value if init_peak is None else max(init_peak, value)
    if total is None:
        return init_peak
    return total if init_peak is None else max(total, init_peak)


def pod_requests(job: Mapping[str, Any]) -> PodRequests:
    """The effective CPU and memory request of one pod of ``job``."""
    spec = pod_spec(job)
    return PodRequests(_effective(spec, "cpu"), _effective(spec, "memory"))
