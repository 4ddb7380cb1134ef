"""Structured logs for every elb-gate process: one JSON object per line
(``ELB_GATE_LOG_FORMAT=json``, production) or ``key=value`` text for a terminal.

Callers pass fields as keywords through :func:`log`, so every record about the
same thing carries the same keys (an admission: uid, namespace, name,
operation, user, decision, reason, duration) and can be filtered.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

_FIELDS = "elb_fields"
"""``extra`` key under which a record carries its structured fields."""


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", **fields}`` on one line; a traceback in ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(getattr(record, _FIELDS, None) or {})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time level logger msg key=value ...`` for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS, None) or {}
        line = (
            f"{self.formatTime(record)} {record.levelname:<7} {record.name} {record.getMessage()}"
        )
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(log_format: str, stream: TextIO | None = None, level: int = logging.INFO) -> None:
    """Install one handler on the root logger (idempotent: replaces earlier handlers)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # aiohttp's access log would print one unstructured line per request or scrape.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


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
        logger.log(level, msg, extra={_FIELDS: fields}, exc_info=exc_info)
