"""docs/security.md keeps its promise: every claim in its table names tests, every
named test exists, every claim the text cites is in the table, and every module
of this suite backs some claim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "security.md"
ROW = re.compile(r"^\| ([A-Z]\d+) \| (.+?) \| (.+) \|$")
TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)(?:\[([^\]]+)\])?`")
CITED = re.compile(r"\[([A-Z]\d+(?:[\u2013-][A-Z]\d+)?(?:, [A-Z]\d+(?:[\u2013-][A-Z]\d+)?)*)\]")


def rows() -> dict[str, list[tuple[str, str, str | None]]]:
    out: dict[str, list[tuple[str, str, str | None]]] = {}
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            out[match[1]] = [(path, name, param) for path, name, param in TEST.findall(match[3])]
    return out


def test_every_claim_names_at_least_one_test() -> None:
    claims = rows()
    assert len(claims) >= 30
    assert [claim for claim, tests in claims.items() if not tests] == []


@pytest.mark.parametrize(
    ("path", "name", "param"), sorted({t for tests in rows().values() for t in tests})
)
def test_every_named_test_exists(path: str, name: str, param: str | None) -> None:
    source = (REPO / path).read_text()
    assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{path} has no {name}"
    if param:
        assert param in source, f"{path} has no case {param!r}"


def _expand(cited: str) -> list[str]:
    out = []
    for part in cited.split(", "):
        first, _, last = part.replace("\u2013", "-").partition("-")
        if last:
            letter = first[0]
            out += [f"{letter}{n}" for n in range(int(first[1:]), int(last[1:]) + 1)]
        else:
            out.append(first)
    return out


def test_every_claim_the_text_cites_is_in_the_table() -> None:
    text = DOC.read_text().split("## Claims and their tests")[0]
    cited = {claim for group in CITED.findall(text) for claim in _expand(group)}
    assert cited, "the text cites no claims"
    assert sorted(cited - rows().keys()) == []


def test_every_module_of_the_security_suite_backs_a_claim() -> None:
    named = {path for tests in rows().values() for path, _, _ in tests}
    modules = {f"tests/security/{p.name}" for p in (REPO / "tests" / "security").glob("test_*.py")}
    assert sorted(modules - named - {"tests/security/test_security_doc.py"}) == []
