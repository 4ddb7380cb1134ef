"""Webhook `matchConditions`: CEL over object, oldObject, request (celpy)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy


@dataclass(frozen=True)
class MatchResult:
    matches: bool
    error: str = ""


@lru_cache(maxsize=256)
def _program(expression: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(expression))


def evaluate(conditions: list[dict[str, Any]], variables: dict[str, Any],
             failure_policy: str) -> MatchResult:
    """The apiserver's matcher: any false → skip; errors (and no false) → failurePolicy."""
    activation = {k: celpy.json_to_cel(v) for k, v in variables.items()}
    errors: list[str] = []
    for cond in conditions:
        expr = cond.get("expression", "")
        try:
            result = _program(expr).evaluate(activation)
        except Exception as exc:
            errors.append(f"expression '{expr}' resulted in error: {_describe(exc)}")
            continue
        if isinstance(result, Exception):
            errors.append(f"expression '{expr}' resulted in error: {_describe(result)}")
        elif not isinstance(result, bool | celpy.celtypes.BoolType):
            errors.append(f"expression '{expr}' resulted in error: "
                          f"cel expression must evaluate to a bool")
        elif not result:
            return MatchResult(False)
    if errors:
        if failure_policy == "Ignore":
            return MatchResult(False)
        return MatchResult(False, "[" + ", ".join(errors) + "]" if len(errors) > 1 else errors[0])
    return MatchResult(True)


def _describe(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    return str(args[0]) if args else str(exc)
