"""What a policy function returns: admit or deny, with the reason and the words;
and what a handler answers.

Policies (``search_admission``, ``lease_guard``, ``lease_stamp``) are pure and
return a :class:`Decision`; the handlers turn it into an :class:`Answer` (the
AdmissionResponse and the outcome), which the HTTP layer (:mod:`webhook.endpoint`)
writes, counts and logs. Nothing here does I/O or knows of HTTP.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.review import STATUS_REASONS, AdmissionResponse, allowed, denied, patched

WARNING_WIDTH = 120
"""kubectl prints each AdmissionReview warning on its own line; keep each short."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one policy, with why."""

    allowed: bool
    reason: str
    """Short snake_case code for metrics and logs (``ok``, ``not_holder``, ``ceiling``...)."""
    message: str = ""
    """One line for a person: which gate, what was seen, what to do."""
    code: int = 200
    """HTTP-style code of a denial: 403 Gate A, 429 Gate B, 409 held elsewhere, 503 unverified."""
    patch: tuple[Mapping[str, Any], ...] = ()
    """JSON Patch of a mutating decision."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """Structured facts for the log line (holder, active ids, ...)."""
    warned: tuple[Decision, ...] = ()
    """Refusals of rules set to ``warn`` that this admit carries as warnings."""
    ceiling: int | None = None
    """Search admission: the effective ceiling the capacity rule computed for this Job
    (``None`` when it computed none: the configured ceiling applies). The census metric
    reports it."""

    @property
    def status_reason(self) -> str:
        return STATUS_REASONS.get(self.code, "")

    def response(self) -> AdmissionResponse:
        """The AdmissionResponse this decision stands for (enforcing mode)."""
        if self.allowed:
            response = patched(self.patch) if self.patch else allowed()
            for soft in self.warned:
                response = response.with_warnings(*soft.warning_lines_for())
            return response
        return denied(self.code, self.status_reason, self.message)

    def warning_lines_for(self, webhook: str = "search-admission.elb-gate.io") -> list[str]:
        """This refusal as AdmissionReview warning lines (``… would deny: …``)."""
        return warning_lines(f"{webhook} would deny: {self.message}")

    def with_warned(self, *refusals: Decision) -> Decision:
        """This admit, carrying ``refusals`` (of rules in warn mode) as warnings."""
        return replace(self, warned=self.warned + refusals)

    def warning_response(self, webhook: str) -> AdmissionResponse:
        """Warn mode: admit, and carry the denial text as warnings of at most
        :data:`WARNING_WIDTH` characters each (split on words, nothing dropped)."""
        response = allowed().with_warnings(*self.warning_lines_for(webhook))
        for soft in self.warned:
            response = response.with_warnings(*soft.warning_lines_for(webhook))
        return response


def admit(reason: str = "ok", message: str = "", **details: Any) -> Decision:
    """An allowing decision."""
    return Decision(True, reason, message, details=details)


def refuse(code: int, reason: str, message: str, **details: Any) -> Decision:
    """A denying decision with its HTTP code and metric reason."""
    return Decision(False, reason, message, code, details=details)


def warning_lines(text: str) -> list[str]:
    """``text`` cut into lines of at most :data:`WARNING_WIDTH` characters."""
    return textwrap.wrap(text, WARNING_WIDTH, break_long_words=True, break_on_hyphens=False)


UNVERIFIED_RETRY_SECONDS = 5
"""What a fail-closed refusal tells the client to wait before the same request again:
one webhook API deadline and a readiness probe's worth of recovery, well inside both
clients' own waits (docs/clients.md)."""


def unverified(subject: str, failure: str) -> Decision:
    """Fail-closed: a read needed to decide failed or timed out (503)."""
    return refuse(
        503,
        "unverified",
        f"elb-gate could not verify {subject} ({failure}), so it refuses (fail-closed). This "
        f"is transient: the request was not applied; retry in {UNVERIFIED_RETRY_SECONDS} s. If it "
        "persists, check that the elb-gate webhook can reach the API server.",
        failure=failure,
    )


@dataclass(frozen=True, slots=True)
class Answer:
    """A judged request: the response sent, its outcome, and the decision behind it
    (whose reason, code, message and details the HTTP layer counts and logs)."""

    response: AdmissionResponse
    outcome: str
    """``allowed``, ``denied`` or ``warned`` (``errored`` is the HTTP layer's own)."""
    decision: Decision
