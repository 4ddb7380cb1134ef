"""Near misses of the labels the gates key on: ``app=Finalizer``, ``app=bIast``,
``elb-job-id=<id> + zero-width space``. Pure.

ElasticBLAST always writes the exact lowercase values, so a near miss is a
hand-made or mistyped Job that would silently bypass the gates (an ``app`` that
is not gated) or open a search of its own (an id that differs from an active one
only in case or look). Search admission refuses them with a 422 that names the
exact expected value.

Folding, in order: Unicode compatibility normalisation (NFKC: fullwidth and
mathematical letters become ASCII), canonical decomposition with combining
marks dropped (``é`` → ``e``), invisible characters dropped (controls, format
characters such as the zero-width space and joiner, whitespace, the blank
Hangul fillers), then the confusables below, compared case-insensitively. A
value also matches when the confusables are applied first, as TR39 orders it:
NFKC reads U+017F (long s) as ``s``, yet it looks like ``f``.

The confusables are the subset of Unicode TR39 (``confusables.txt``) that maps
onto the letters of the gated values and of ElasticBLAST's ids (``job-`` and
hex digits): Cyrillic, Greek, Armenian and Latin look-alikes, plus the ASCII
ones a label value may legally hold (``1``, ``I`` and ``|`` for ``l``, ``0`` for
``o``, ``rn`` for ``m``). What the API server lets through (label values are
ASCII letters, digits, ``-``, ``_`` and ``.``) is caught by the webhook's
matchConditions too (``NEAR_MISS_APP_PATTERN``); the rest can only arrive in a
hand-made AdmissionReview, and is refused all the same.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

# One line per letter: it reads as the table it is.
# fmt: off
CONFUSABLES: dict[str, str] = {
    # a
    "\u0430": "a", "\u0251": "a", "\u03b1": "a", "\u237a": "a",
    # b
    "\u044c": "b", "\u0185": "b", "\u0184": "b", "\u13cf": "b", "\u15af": "b",
    # c
    "\u0441": "c", "\u03f2": "c", "\u1d04": "c", "\u217d": "c",
    # d
    "\u0501": "d", "\u217e": "d", "\u13e7": "d",
    # e
    "\u0435": "e", "\u04bd": "e", "\u212e": "e", "\u212f": "e", "\u22ff": "e",
    # f
    "\u0192": "f", "\u1e9d": "f", "\u017f": "f", "\u03dc": "f",
    # i
    "\u0456": "i", "\u03b9": "i", "\u0131": "i", "\u0269": "i", "\u026a": "i", "\u2170": "i",
    "\u1fbe": "i",
    # j
    "\u0458": "j", "\u03f3": "j",
    # l
    "\u04cf": "l", "\u01c0": "l", "\u0399": "l", "\u2113": "l", "\u0196": "l",
    "\u05c0": "l", "\u2160": "l", "\u217c": "l",
    # m
    "\u217f": "m",
    # n
    "\u0578": "n", "\u057c": "n",
    # o
    "\u043e": "o", "\u03bf": "o", "\u0585": "o", "\u05e1": "o", "\u0ce6": "o", "\u1d0f": "o",
    # p
    "\u0440": "p", "\u03c1": "p", "\u2374": "p",
    # r
    "\u0433": "r", "\u1d26": "r", "\uab47": "r",
    # s
    "\u0455": "s", "\ua731": "s", "\u01bd": "s",
    # t
    "\u03c4": "t", "\u0442": "t",
    # u
    "\u03c5": "u", "\u057d": "u", "\u028b": "u", "\ua79f": "u", "\u1d1c": "u",
    # x
    "\u0445": "x", "\u03c7": "x", "\u2179": "x",
    # y
    "\u0443": "y", "\u03b3": "y", "\u0263": "y",
    # z
    "\u1d22": "z", "\u0290": "z",
}
# fmt: on
"""Look-alike → the ASCII letter it imitates (checked on the character and on its
lowercase form, so uppercase Cyrillic and Greek are covered too)."""

SEQUENCES = (("rn", "m"), ("vv", "w"))
"""Multi-character look-alikes (TR39), applied after the single characters."""

CLASSES = str.maketrans({"i": "l", "1": "l", "|": "l", "0": "o"})
"""Letters that cannot be told apart in many fonts, compared as one: ``l``, ``I``
(``i`` once lowercased), ``1`` and ``|``; ``0`` and ``o``."""

_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Me"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
"""Letters and symbols that render as nothing: the Hangul fillers (default-ignorable
code points of category Lo) and the blank Braille pattern."""


def _invisible(char: str) -> bool:
    return (
        unicodedata.category(char) in _INVISIBLE_CATEGORIES
        or char.isspace()
        or char in _BLANK_LETTERS
    )


def _visible(value: str) -> str:
    """NFKC, then decomposed with marks, controls, format characters and spaces dropped."""
    decomposed = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", value))
    return "".join(c for c in decomposed if not _invisible(c))


def _confusable(char: str) -> str:
    if char in CONFUSABLES:
        return CONFUSABLES[char]
    lower = char.lower()
    return CONFUSABLES.get(lower, lower)


@functools.lru_cache(maxsize=4096)
def skeleton(value: str) -> str:
    """What ``value`` looks like: the string two look-alike values share. Cached: every
    search admission compares the new id with each active search's, and those repeat."""
    folded = "".join(_confusable(c) for c in _visible(value)).lower()
    for sequence, letter in SEQUENCES:
        folded = folded.replace(sequence, letter)
    return folded.translate(CLASSES)


@functools.lru_cache(maxsize=1024)
def _shapes(value: str) -> frozenset[str]:
    """``value``'s skeleton, and its skeleton with the look-alikes mapped before
    NFKC (TR39's order), which NFKC would otherwise read differently (U+017F, long s)."""
    early = "".join(CONFUSABLES.get(c, c) for c in value)
    return frozenset((skeleton(value), skeleton(early)))


def near_miss(value: str, expected: Iterable[str]) -> str | None:
    """The expected value that ``value`` imitates without being it, else ``None``."""
    candidates = tuple(expected)
    if value in candidates:
        return None
    shapes = _shapes(value)
    for candidate in candidates:
        if skeleton(candidate) in shapes:
            return candidate
    return None


LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
"""A valid Kubernetes label value (what the API server accepts)."""


@dataclass(frozen=True, slots=True)
class IdProblem:
    """Why an ``elb-job-id`` value cannot be an id ElasticBLAST wrote."""

    found: tuple[str, ...]
    """What is wrong, as short phrases (``"a zero-width space (U+200B)"``)."""
    suggestion: str
    """The value with the problem characters removed and look-alikes folded to
    ASCII, or ``""`` when no valid label value comes out of it."""


def _describe(char: str) -> str:
    code = f"U+{ord(char):04X}"
    name = unicodedata.name(char, "").lower()
    if char.isspace():
        return f"whitespace ({code})" if not name else f"whitespace: {name} ({code})"
    if unicodedata.category(char) == "Cc":
        return f"a control character ({code})"
    if unicodedata.category(char) == "Cf":
        return f"an invisible {name or 'format character'} ({code})"
    return f"a non-ASCII {name or 'character'} ({code})"


def job_id_problem(value: str) -> IdProblem | None:
    """Whitespace, control, invisible or non-ASCII characters in an ``elb-job-id``."""
    if value.isascii() and value.isprintable() and " " not in value:
        return None  # what ElasticBLAST writes: the common case, without a per-character scan
    bad = [c for c in value if not c.isascii() or not c.isprintable() or c.isspace()]
    if not bad:
        return None
    found = tuple(dict.fromkeys(_describe(c) for c in bad))
    cleaned = "".join(c if c.isascii() else _confusable_keep_case(c) for c in _visible(value))
    suggestion = cleaned if cleaned.isascii() and LABEL_VALUE.match(cleaned) and cleaned else ""
    return IdProblem(found, suggestion)


def _confusable_keep_case(char: str) -> str:
    folded = _confusable(char)
    return folded if folded.isascii() else char


NEAR_MISS_APP_PATTERN = r"(?i)^(f[il1|]na[il1|][il1|]zer|setup|sub(m|rn)[il1|]t|b[il1|]ast)$"
"""RE2 (CEL ``matches``) for the ``app`` values the API server can hold that fold to
a gated one: the gated values in any case and with ASCII look-alikes. Used in the
webhook's matchConditions; tests check it against :func:`near_miss`."""
