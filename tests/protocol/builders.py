"""Small builders for Job and Lease dicts, so tables read as sentences."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class JobBuilder:
    app: str
    id: str | None
    name: str = ""
    age: float | None = 10.0
    status: dict[str, Any] = field(default_factory=dict)
    created_raw: str | None = None

    def complete(self) -> JobBuilder:
        self.status = {"succeeded": 1, "completionTime": ts(1)}
        return self

    def failed_but_retrying(self) -> JobBuilder:
        self.status = {"failed": 2}
        return self

    def failed_condition(self) -> JobBuilder:
        self.status = {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}
        return self

    def with_status(self, **status: Any) -> JobBuilder:
        self.status = status
        return self

    def created(self, raw: str) -> JobBuilder:
        self.created_raw = raw
        return self

    def aged(self, seconds: float | None) -> JobBuilder:
        self.age = seconds
        return self

    def build(self) -> dict[str, Any]:
        labels = {"app": self.app}
        if self.id is not None:
            labels["elb-job-id"] = self.id
        name = self.name or f"{self.app}-{self.id or 'x'}"
        meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels}
        if self.created_raw is not None:
            meta["creationTimestamp"] = self.created_raw
        elif self.age is not None:
            meta["creationTimestamp"] = ts(self.age)
        return {"metadata": meta, "status": self.status}


def job(app: str, id: str | None = None, name: str = "") -> JobBuilder:
    return JobBuilder(app=app, id=id, name=name)


def lease(
    holder: str = "",
    renewed_ago: float | None = 5.0,
    duration: int | None = 900,
    renew_raw: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": holder}
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    if renew_raw is not None:
        spec["renewTime"] = renew_raw
    elif renewed_ago is not None:
        spec["renewTime"] = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "metadata": {
            "name": "elb-blast-submit-default",
            "namespace": "default",
            "resourceVersion": "7",
            "annotations": annotations or {},
        },
        "spec": spec,
    }
