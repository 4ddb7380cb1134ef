"""Structured logs: one JSON object per line, the same fields on every admission."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

DECISION_FIELDS = "fields"
"""``extra`` key under which a record carries its structured fields."""


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", …fields}``; a traceback goes in ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(getattr(record, DECISION_FIELDS, None) or {})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """``level logger msg key=value …`` for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, DECISION_FIELDS, None) or {}
        kv = " ".join(f"{k}={v}" for k, v in fields.items())
        text = f"{record.levelname.lower()} {record.name} {record.getMessage()} {kv}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    """Send every log record to stderr as JSON (``json``) or text."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def log_fields(
    logger: logging.Logger, level: int, msg: str, *, exc_info: bool = False, **fields: Any
) -> None:
    """Log ``msg`` with structured ``fields`` (and the current traceback if ``exc_info``)."""
    logger.log(level, msg, exc_info=exc_info, extra={DECISION_FIELDS: fields})
