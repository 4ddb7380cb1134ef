"""Where the webhook's CPU goes: py-spy samples of the running process, summarised.

py-spy is not a project dependency; install it into the venv when profiling
(``.venv/bin/pip install py-spy``). Its ``raw`` output is one collapsed stack
per line (``frame;frame;… count``, root first); we fold it into self time per
function, inclusive time per function, and self time per package.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    """Path of the py-spy binary next to this interpreter, or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def start_recording(
    pid: int, seconds: float, out: Path, rate: int = 250
) -> subprocess.Popen[bytes]:
    """Sample ``pid`` for ``seconds`` without pausing it; raw collapsed stacks to ``out``."""
    exe = py_spy()
    if exe is None:
        raise RuntimeError("py-spy not installed: .venv/bin/pip install py-spy")
    args = [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    args += ["--rate", str(rate), "--format", "raw", "--function", "--nonblocking"]
    args += ["--output", str(out)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


PROJECT = ("webhook", "elbgate", "controller", "bench")


def package_of(file: str) -> str:
    """A coarse owner for a source file: ``webhook``, ``elbgate``, ``aiohttp``,
    ``asyncio``, ``ssl`` … (py-spy already shortens most paths to ``pkg/mod.py``)."""
    path = file.replace("\\", "/")
    for mark in ("/site-packages/", "/lib/python3"):
        if mark in path:
            path = path.split(mark, 1)[1]
            if mark == "/lib/python3":
                path = path.split("/", 1)[1] if "/" in path else path
    parts = [p for p in path.split("/") if p]
    for owner in PROJECT:
        if owner in parts:
            return owner
    return parts[0].removesuffix(".py") if parts else "?"


@dataclass
class Profile:
    """Folded samples of one recording."""

    samples: int = 0
    self_by_function: Counter[str] = field(default_factory=Counter)
    inclusive_by_function: Counter[str] = field(default_factory=Counter)
    inclusive_in_project: Counter[str] = field(default_factory=Counter)
    """Inclusive time of elb-gate's own functions only (where the policy cost shows)."""
    self_by_package: Counter[str] = field(default_factory=Counter)

    def top(self, counter: Counter[str], n: int = 12) -> list[tuple[str, float]]:
        """The ``n`` largest entries as (name, share of samples)."""
        total = self.samples or 1
        return [(name, count / total) for name, count in counter.most_common(n)]

    def as_text(self, n: int = 12) -> str:
        lines = [f"{self.samples} samples"]
        for title, counter in (
            ("self time by package", self.self_by_package),
            ("self time by function", self.self_by_function),
            ("inclusive time, elb-gate's own functions", self.inclusive_in_project),
        ):
            lines.append(f"  {title}:")
            lines += [f"    {share:6.1%}  {name}" for name, share in self.top(counter, n)]
        return "\n".join(lines)


def fold(lines: Iterable[str]) -> Profile:
    """Fold py-spy ``raw`` lines into a :class:`Profile` (idle samples included: an
    event loop waiting in ``select`` is where a not-saturated process spends time)."""
    prof = Profile()
    for line in lines:
        line = line.rstrip()
        if not line or " " not in line:
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        prof.samples += count
        names = []
        for frame in frames:
            m = _FRAME.match(frame)
            func, file = (m["func"], m["file"]) if m else (frame, "?")
            names.append((f"{func} ({_short(file)})", file))
        leaf_name, leaf_file = names[-1]
        prof.self_by_function[leaf_name] += count
        prof.self_by_package[package_of(leaf_file)] += count
        for name, file in set(names):
            prof.inclusive_by_function[name] += count
            if package_of(file) in PROJECT:
                prof.inclusive_in_project[name] += count
    return prof


_CHECKOUT = str(Path(__file__).resolve().parents[1]) + "/"
"""This checkout's root: project frames are shown relative to it."""


def _short(file: str) -> str:
    for mark in ("/site-packages/", _CHECKOUT):
        if mark in file:
            return file.split(mark, 1)[1]
    return file.rsplit("/lib/", 1)[-1]
