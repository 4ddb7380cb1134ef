"""How elb-gate's long-running processes set up the Python runtime before serving.

One setting so far, the cyclic garbage collector's. What the webhook and the
controller spend their CPU on is decoding the API server's JSON: a census LIST is
a tree of thousands of dicts and lists (a Job with its ``managedFields`` is about a
thousand), and none of them is part of a reference cycle — reference counting frees
each tree the moment its request is done. The collector, left at CPython's default
(a young-generation pass every 700 net container allocations), walks every such
tree several times while it is still being built, promotes it, and, once enough
has been promoted, walks the whole heap. Measured in the webhook on the real API
server (py-spy, 16 admissions in flight, 30 Jobs in the namespace): 349 us of its
CPU per admission went to decoding the LIST, 64 us of it with the young
generation's threshold at 50,000; the cycles asyncio and aiohttp do create are
still collected, only less often.

:func:`tune_gc` also freezes what start-up allocated (modules, settings, the app),
so the passes that do run no longer walk it. ``python -m webhook`` and ``python -m
controller`` call it once, before they serve.
"""

from __future__ import annotations

import gc

YOUNG_GENERATION_THRESHOLD = 50_000
"""Net container allocations between two young-generation passes (CPython: 700).
Above what one admission's decode allocates at a few hundred Jobs, so a pass rarely
runs in the middle of one; the pass walks only the young objects still alive, so
its length is bounded by the requests in flight, not by this number."""


def tune_gc() -> None:
    """Collect once, freeze the survivors (start-up's objects), and raise the young
    generation's threshold to :data:`YOUNG_GENERATION_THRESHOLD` (the older
    generations' thresholds are CPython's)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, older, oldest)
