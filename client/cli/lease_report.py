"""What the CLI says about a submit Lease: its fields in words, and whether
``lease release --force`` may clear it. Pure, shared by ``lease`` and ``census``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from client.lease_ops import describe_holder
from elbgate.durations import format_distance
from elbgate.lease import LeaseView, Unparseable, format_microtime
from elbgate.settings import GateSettings


def _time(value: datetime | Unparseable | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, Unparseable):
        return "unparseable"
    return format_microtime(value)


def lease_summary(
    lease: dict[str, Any] | None, name: str, gate: GateSettings, now: datetime
) -> dict[str, Any]:
    """JSON-ready facts about the Lease (``exists: false`` when there is none)."""
    if lease is None:
        return {"name": name, "exists": False, "held": False, "state": "absent"}
    view = LeaseView.from_dict(lease)
    until = gate.expiry.at(view)
    expired = gate.expiry.passed(view, now)
    state = "free" if not view.held else ("expired" if expired else "held")
    return {
        "name": name,
        "exists": True,
        "held": view.held,
        "state": state,
        "holder": view.holder or None,
        "holderUser": view.holder_user or None,
        "holderPod": view.holder_pod or None,
        "acquireTime": _time(view.acquire_time),
        "renewTime": _time(view.renew_time),
        "leaseDurationSeconds": view.duration_seconds,
        "expiresAt": _time(until),
        "expiresInSeconds": (
            round((until - now).total_seconds()) if isinstance(until, datetime) else None
        ),
        "resourceVersion": view.resource_version,
    }


def describe_lease(summary: dict[str, Any]) -> str:
    """One line: ``Lease NAME: held by X (user U, pod P) until T (in 42s)``."""
    name = summary["name"]
    state = summary["state"]
    if state == "absent":
        return f"Lease {name}: does not exist (created by the first submit)"
    if state == "free":
        return f"Lease {name}: free"
    who = summary["holder"]
    extras = [f"user {summary['holderUser']}"] if summary["holderUser"] else []
    if summary["holderPod"]:
        extras.append(f"pod {summary['holderPod']}")
    if extras:
        who += " (" + ", ".join(extras) + ")"
    left = summary["expiresInSeconds"]
    if state == "expired":
        return f"Lease {name}: held by {who}, EXPIRED at {summary['expiresAt']}"
    when = f" ({format_distance(left)})" if left is not None else ""
    return f"Lease {name}: held by {who} until {summary['expiresAt']}{when}"


@dataclass(frozen=True, slots=True)
class ForceVerdict:
    allowed: bool
    message: str
    live: bool = False
    """Refused because someone holds the Lease in force (exit REFUSED, not OK)."""


def force_release_verdict(
    lease: dict[str, Any] | None, gate: GateSettings, now: datetime
) -> ForceVerdict:
    """``lease release --force`` clears only a held, expired Lease (what the
    controller does). A live one is refused, naming who holds it until when."""
    if lease is None:
        return ForceVerdict(False, "no submit Lease exists; nothing to release")
    view = LeaseView.from_dict(lease)
    if not view.held:
        return ForceVerdict(False, f"Lease {view.name} is already free; nothing to release")
    held = describe_holder(view, gate.expiry)
    if not gate.expiry.passed(view, now):
        return ForceVerdict(
            False,
            f"refusing to release Lease {view.name}: it is live, {held}. Only its holder "
            "releases a live Lease; wait for it to finish or expire",
            live=True,
        )
    return ForceVerdict(True, f"Lease {view.name} {held} has expired; releasing it")
