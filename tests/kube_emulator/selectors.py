"""Label selectors (string and LabelSelector forms) and field selectors, as the apiserver parses them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import bad_request

LabelMatcher = Callable[[Mapping[str, str]], bool]

_KEY = r"[^\s=!<>(),]+"
_NOT_EXISTS = re.compile(rf"^!\s*({_KEY})$")
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_CMP = re.compile(rf"^({_KEY})\s*(==|=|!=|>|<)\s*([^\s=!<>(),]*)$")
_EXISTS = re.compile(rf"^({_KEY})$")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _requirement(text: str) -> LabelMatcher:
    text = text.strip()
    if m := _NOT_EXISTS.match(text):
        key = m[1]
        return lambda labels: key not in labels
    if m := _SET.match(text):
        key, op = m[1], m[2]
        values = {v.strip() for v in m[3].split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _CMP.match(text):
        key, op, value = m[1], m[2], m[3]
        if op in ("=", "=="):
            return lambda labels: labels.get(key) == value
        if op == "!=":
            return lambda labels: labels.get(key) != value
        try:
            bound = int(value)
        except ValueError:
            raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, "
                              f"the value must be an integer: {value!r}") from None
        if op == ">":
            return lambda labels: key in labels and _int(labels[key]) > bound
        return lambda labels: key in labels and _int(labels[key]) < bound
    if m := _EXISTS.match(text):
        key = m[1]
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: found '{text}', expected: identifier")


def _int(value: str) -> float:
    try:
        return int(value)
    except ValueError:
        return float("nan")


def parse_label_selector(text: str | None) -> LabelMatcher:
    """Parse `a=b,c!=d,e in (x,y),!f`; an empty selector matches everything."""
    if not text or not text.strip():
        return lambda labels: True
    reqs = [_requirement(part) for part in _split_top_level(text)]
    return lambda labels: all(req(labels) for req in reqs)


def label_selector_matcher(selector: Mapping[str, Any] | None) -> LabelMatcher:
    """A metav1.LabelSelector (matchLabels + matchExpressions). None or {} matches everything."""
    if not selector:
        return lambda labels: True
    reqs: list[tuple[str, str, set[str]]] = [
        (key, "In", {value}) for key, value in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        if expr["operator"] not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise bad_request(f'"{expr["operator"]}" is not a valid label selector operator')
        reqs.append((expr["key"], expr["operator"], set(expr.get("values") or [])))

    def holds(labels: Mapping[str, str], key: str, op: str, values: set[str]) -> bool:
        if op in ("Exists", "DoesNotExist"):
            return (key in labels) == (op == "Exists")
        return (labels.get(key) in values) == (op == "In")

    return lambda labels: all(holds(labels, *req) for req in reqs)


FieldRequirement = tuple[str, str, str]  # (label, op, value), op in "=", "!="


def parse_field_selector(text: str | None) -> list[FieldRequirement]:
    """Parse `metadata.name=x,status.successful!=0` (`==` is `=`)."""
    reqs: list[FieldRequirement] = []
    if not text:
        return reqs
    for part in re.split(r"(?<!\\),", text):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^([^=!]+?)\s*(!=|==|=)\s*(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        op = "!=" if m[2] == "!=" else "="
        reqs.append((m[1].strip(), op, m[3].replace("\\,", ",").replace("\\=", "=")))
    return reqs


def field_matches(reqs: list[FieldRequirement], value_of: Callable[[str], str | None]) -> bool:
    """True when every requirement holds; an unsupported label is a 400 like the apiserver's."""
    for label, op, want in reqs:
        have = value_of(label)
        if have is None:
            raise bad_request(f"field label not supported: {label}")
        if (have == want) != (op == "="):
            return False
    return True
