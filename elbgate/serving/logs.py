"""How the servers write their logs: one JSON object per line
(``ELB_GATE_LOG_FORMAT=json``, production) or ``key=value`` text for a terminal,
with the structured fields :func:`elbgate.logs.log` attached."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

from elbgate.logs import FIELDS


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", **fields}`` on one line; a traceback in ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(getattr(record, FIELDS, None) or {})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time level logger msg key=value ...`` for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, FIELDS, None) or {}
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
