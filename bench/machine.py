"""What the numbers were measured on: CPU, cores, Python, load, date."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """``model name`` from /proc/cpuinfo (or the platform's best guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> tuple[float, float, float]:
    """1, 5 and 15-minute load averages (what ``uptime`` prints)."""
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def machine_info() -> dict[str, Any]:
    """The machine section of results.json."""
    import aiohttp

    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "aiohttp": aiohttp.__version__,
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_at_start": list(load_average()),
    }
