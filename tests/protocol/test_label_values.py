"""Near misses of the gated labels: look-alike ``app`` values and malformed ``elb-job-id``s."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elbgate.label_values import (
    LABEL_VALUE,
    NEAR_MISS_APP_PATTERN,
    job_id_problem,
    near_miss,
    skeleton,
)
from elbgate.names import SEARCH_APPS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("Finalizer", "finalizer", id="capitalised"),
        pytest.param("BLAST", "blast", id="upper case"),
        pytest.param(" blast", "blast", id="leading space"),
        pytest.param("setup\t", "setup", id="trailing tab"),
        pytest.param("sub\u00a0mit", "submit", id="no-break space inside"),
        pytest.param("fin\u200balizer", "finalizer", id="zero-width space"),
        pytest.param("bla\u200dst", "blast", id="zero-width joiner"),
        pytest.param("\ufeffsetup", "setup", id="byte-order mark"),
        pytest.param("blast\x00", "blast", id="trailing NUL"),
        pytest.param("fin\u0430lizer", "finalizer", id="Cyrillic a"),
        pytest.param("\u0455etup", "setup", id="Cyrillic dze for s"),
        pytest.param("setu\u0440", "setup", id="Cyrillic er for p"),
        pytest.param("s\u0435tup", "setup", id="Cyrillic ie for e"),
        pytest.param("f\u0456nalizer", "finalizer", id="Cyrillic dotted i"),
        pytest.param("FIN\u0410LIZER", "finalizer", id="upper-case Cyrillic A"),
        pytest.param(
            "\uff46\uff49\uff4e\uff41\uff4c\uff49\uff5a\uff45\uff52", "finalizer", id="fullwidth"
        ),
        pytest.param(
            "\U0001d41b\U0001d425\U0001d41a\U0001d42c\U0001d42d", "blast", id="mathematical bold"
        ),
        pytest.param("bl\u03b1st", "blast", id="Greek alpha"),
        pytest.param("s\u03c5bmit", "submit", id="Greek upsilon for u"),
        pytest.param("bl\u00e1st", "blast", id="an accent"),
        pytest.param("fina1izer", "finalizer", id="digit one for l"),
        pytest.param("bIast", "blast", id="capital I for l"),
        pytest.param("b|ast", "blast", id="bar for l"),
        pytest.param("subrnit", "submit", id="rn for m"),
        pytest.param("f\u0131nalizer", "finalizer", id="dotless i"),
        pytest.param("\u017finalizer", "finalizer", id="long s for f (TR39; NFKC reads it as s)"),
        pytest.param("\u017fetup", "setup", id="long s read as s"),
        pytest.param("f\u026analizer", "finalizer", id="small capital I"),
        pytest.param("s\u1d1cbmit", "submit", id="small capital U"),
        pytest.param("\u0184last", "blast", id="tone six for b"),
        pytest.param("b\u0196ast", "blast", id="Latin capital iota for l"),
        pytest.param("\u03dcinalizer", "finalizer", id="Greek digamma for F"),
        pytest.param("fi\u0578alizer", "finalizer", id="Armenian vo for n"),
        pytest.param("s\u057dbmit", "submit", id="Armenian seh for u"),
        pytest.param("\u13cflast", "blast", id="Cherokee for b"),
        pytest.param("b\u05c0ast", "blast", id="Hebrew paseq for l"),
        pytest.param("b\u0399ast", "blast", id="Greek capital iota for l"),
        pytest.param("b\u04cfast", "blast", id="Cyrillic palochka for l"),
        pytest.param("sub\u217fit", "submit", id="Roman numeral one thousand for m"),
        pytest.param("b\u2113ast", "blast", id="script l"),
        pytest.param("se\u0442up", "setup", id="Cyrillic te for t"),
        pytest.param("setu\u03c1", "setup", id="Greek rho for p"),
        pytest.param("\u24d1\u24db\u24d0\u24e2\u24e3", "blast", id="circled letters"),
        pytest.param("\U0001d51f\U0001d529\U0001d51e\U0001d530\U0001d531", "blast", id="Fraktur"),
        pytest.param("B\u0130AST", "blast", id="Turkish dotted capital I"),
        pytest.param("b\u0336last", "blast", id="combining strike-through"),
        pytest.param("bla\u00adst", "blast", id="soft hyphen"),
        pytest.param("blast\ufe0f", "blast", id="variation selector"),
        pytest.param("blast\U000e0041", "blast", id="tag character"),
        pytest.param("\u200fblast", "blast", id="right-to-left mark"),
        pytest.param("bla\u180est", "blast", id="Mongolian vowel separator"),
        pytest.param("blast\u3164", "blast", id="Hangul filler"),
        pytest.param("bl\uffa0ast", "blast", id="halfwidth Hangul filler"),
        pytest.param("setup\u2800", "setup", id="blank Braille pattern"),
        pytest.param("blast\u3000", "blast", id="ideographic space"),
    ],
)
def test_a_look_alike_app_names_the_exact_gated_value(value: str, expected: str) -> None:
    assert near_miss(value, SEARCH_APPS) == expected


@pytest.mark.parametrize(
    "value",
    [
        "finalizer",
        "setup",
        "submit",
        "blast",
        "web",
        "blaster",
        "blasts",
        "setup-db",
        "",
        "elb-db-warmup",
        "janitor",
        "fina",
    ],
)
def test_exact_and_unrelated_values_are_no_near_miss(value: str) -> None:
    assert near_miss(value, SEARCH_APPS) is None


def test_the_gated_values_stay_apart_after_folding() -> None:
    assert len({skeleton(app) for app in SEARCH_APPS}) == len(SEARCH_APPS)


@pytest.mark.parametrize(
    ("value", "says", "suggestion"),
    [
        ("job-0123abcd ", "whitespace: space (U+0020)", "job-0123abcd"),
        (" job-0123abcd", "whitespace", "job-0123abcd"),
        ("job-0123\u200babcd", "invisible zero width space (U+200B)", "job-0123abcd"),
        ("job-0123abcd\u2060", "invisible word joiner (U+2060)", "job-0123abcd"),
        ("j\u043eb-0123abcd", "non-ASCII cyrillic small letter o (U+043E)", "job-0123abcd"),
        ("job-\uff10\uff11", "non-ASCII fullwidth digit zero (U+FF10)", "job-01"),
        ("job-01\x07", "control character (U+0007)", "job-01"),
        ("job-\x01", "control character (U+0001)", ""),
        ("job-0123\u3164abcd", "non-ASCII hangul filler (U+3164)", "job-0123abcd"),
        ("job-\u1d0f123", "non-ASCII latin letter small capital o (U+1D0F)", "job-o123"),
        ("\u4f5c\u696d", "non-ASCII", ""),
    ],
)
def test_a_malformed_id_is_described_and_the_clean_value_suggested(
    value: str, says: str, suggestion: str
) -> None:
    problem = job_id_problem(value)
    assert problem is not None
    assert any(says in phrase for phrase in problem.found), problem.found
    assert problem.suggestion == suggestion


@pytest.mark.parametrize("value", ["job-0123456789abcdef0123456789abcdef", "a", "A.b_c-1"])
def test_a_well_formed_id_has_no_problem(value: str) -> None:
    assert job_id_problem(value) is None


# -- the matchConditions pattern catches every near miss a label value can hold ------------

LABEL_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
APP_PATTERN = re.compile(NEAR_MISS_APP_PATTERN)


def _ascii_look_alikes(value: str) -> st.SearchStrategy[str]:
    """``value`` with each letter in either case and, where one exists, replaced
    by an ASCII look-alike a label value may hold."""
    swaps = {"l": ["l", "L", "1", "I"], "i": ["i", "I", "1", "l"], "m": ["m", "M", "rn", "RN"]}

    def letter(c: str) -> st.SearchStrategy[str]:
        return st.sampled_from(swaps.get(c, [c, c.upper()]))

    return st.tuples(*(letter(c) for c in value)).map("".join)


@given(st.sampled_from(SEARCH_APPS).flatmap(_ascii_look_alikes))
def test_every_ascii_look_alike_of_a_gated_app_is_sent_to_the_webhook(value: str) -> None:
    assert LABEL_VALUE.match(value)
    assert near_miss(value, SEARCH_APPS) in (None, *SEARCH_APPS)
    assert value in SEARCH_APPS or near_miss(value, SEARCH_APPS) is not None
    assert APP_PATTERN.match(value)


@given(st.text(alphabet=LABEL_CHARS, min_size=1, max_size=12))
def test_no_label_value_the_pattern_misses_is_a_near_miss(value: str) -> None:
    if not APP_PATTERN.match(value):
        assert value not in SEARCH_APPS
        assert near_miss(value, SEARCH_APPS) is None
