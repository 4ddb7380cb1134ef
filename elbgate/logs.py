"""Structured logs for every elb-gate process.

Callers pass fields as keywords through :func:`log`, so every record about the
same thing carries the same keys (an admission: uid, namespace, name,
operation, user, decision, reason, duration) and can be filtered. How a record is
written (one JSON object per line, or ``key=value`` text) is the servers' set-up:
:mod:`elbgate.serving.logs`.
"""

from __future__ import annotations

import logging
from typing import Any

FIELDS = "elb_fields"
"""``extra`` key under which a record carries its structured fields."""


def log(
    logger: logging.Logger,
    level: int,
    msg: str,
    *,
    exc_info: bool | BaseException = False,
    **fields: Any,
) -> None:
    """Log ``msg`` with structured ``fields`` (JSON keys or key=value); ``exc_info``:
    the exception being handled (``True``) or one caught earlier."""
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={FIELDS: fields}, exc_info=exc_info)
