"""Label selectors as ``kubectl -l`` writes them, matched against a label map. Pure.

Supports what a node-pool selector needs: ``k=v`` / ``k==v``, ``k!=v``, ``k``,
``!k``, ``k in (a,b)`` and ``k notin (a,b)``, comma-separated (all must hold).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_SET = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)$")
_EQ = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_EXISTS = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)$")


class SelectorError(ValueError):
    """Not a label selector elb-gate understands."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str
    """``in``, ``notin``, ``exists`` or ``!exists`` (``=`` is ``in`` with one value)."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


def _split(raw: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in raw:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts]


def parse_selector(raw: str) -> tuple[Requirement, ...]:
    """The requirements of ``raw`` (``""`` selects everything)."""
    if not raw.strip():
        return ()
    out: list[Requirement] = []
    for part in _split(raw):
        if m := _SET.match(part):
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            out.append(Requirement(m["key"], m["op"], values))
        elif m := _EQ.match(part):
            out.append(
                Requirement(m["key"], "notin" if m["op"] == "!=" else "in", frozenset({m["value"]}))
            )
        elif m := _EXISTS.match(part):
            out.append(Requirement(m["key"], "!exists" if m["neg"] else "exists"))
        else:
            raise SelectorError(f"not a label selector requirement: {part!r}")
    return tuple(out)


def selects(requirements: tuple[Requirement, ...], labels: Mapping[str, str]) -> bool:
    """All requirements hold for ``labels``."""
    return all(r.matches(labels) for r in requirements)
