"""Kubernetes resource quantities (``6``, ``15740m``, ``4Gi``, ``251.7G``, ``1e3``) as numbers.

The grammar is the API server's (apimachinery ``resource.Quantity``): a signed
decimal, then a binary suffix (Ki … Ei), a decimal suffix (n u m k M G T P E) or
an exponent (``e3``). CPU is counted in millicores and memory in bytes, rounded
up, as the scheduler does.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse(raw: object) -> Decimal:
    """The value of a quantity (``"4Gi"`` → 4294967296); ints and floats pass through."""
    if isinstance(raw, bool):
        raise QuantityError(f"not a quantity: {raw!r}")
    if isinstance(raw, int | float):
        return Decimal(str(raw))
    if not isinstance(raw, str):
        raise QuantityError(f"not a quantity: {raw!r}")
    match = _QUANTITY.match(raw.strip())
    if match is None:
        raise QuantityError(f"not a quantity: {raw!r}")
    try:
        number = Decimal(match["number"])
    except InvalidOperation:
        raise QuantityError(f"not a quantity: {raw!r}") from None
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def millicores(raw: object) -> int:
    """CPU quantity in millicores, rounded up (``"6"`` → 6000, ``"15740m"`` → 15740)."""
    return _ceil(parse(raw) * 1000)


def bytes_of(raw: object) -> int:
    """Memory quantity in bytes, rounded up (``"4Gi"`` → 4294967296)."""
    return _ceil(parse(raw))


def cpu_text(milli: int) -> str:
    """``6000`` → ``6``; ``15740`` → ``15740m`` (the way kubectl shows requests)."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def memory_text(size: int, *, round_up: bool = False) -> str:
    """Bytes in the largest binary unit, one decimal: ``120.7Gi``, ``4Gi``, ``512Mi``.
    Rounded down by default (what a node offers), up with ``round_up`` (what a pod needs)."""
    for unit, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size >= factor:
            value = Decimal(size) / factor
            rounding = ROUND_CEILING if round_up else ROUND_FLOOR
            shown = value.quantize(Decimal("0.1"), rounding=rounding)
            text = f"{shown:f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return str(size)
