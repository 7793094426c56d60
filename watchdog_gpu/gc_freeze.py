"""Keep the objects that live as long as the process out of the garbage collector's full passes.

Why: CPython's cyclic collector walks every container object it tracks on each full
(generation 2) collection. After start-up a daemon holds ≈ 120,000 of them that never become
garbage: the imported modules' functions, classes and dicts (SQLAlchemy, pydantic, paramiko,
httpx, APScheduler, ours), the configuration, the wiring, the compiled statements. A tick at
1,000 instances allocates enough surviving objects to trigger a full collection in most ticks,
and walking those start-up objects was most of its ≈ 100–150 ms (bench/README.md, "gc.freeze at
start-up"). ``gc.freeze()`` moves everything tracked at that moment to a permanent generation
the collector skips; objects made later are collected as before.

What it costs: a start-up object that later becomes part of unreachable cyclic garbage is not
collected while frozen (reference counting still frees everything else). The frozen set is
what start-up built, which lives until shutdown anyway; :func:`long_lived_frozen` unfreezes on
the way out, so an in-process caller (a test starting and stopping daemons) gets its objects
back to the collector.

The collection thresholds stay at CPython's defaults: larger young generations cut the
remaining collection time by a further ≈ 15–25 ms a tick at 1,000 instances but raised the peak
resident size by ≈ 1 MiB (bench/README.md), and memory is the scarcer resource on the small
machines this runs on.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def long_lived_frozen() -> Iterator[int]:
    """Collect, then freeze every object the collector tracks now, for the block; yields how
    many are frozen. On exit they go back to the collector (``gc.unfreeze``)."""
    gc.collect()  # garbage made during start-up is freed, not frozen
    gc.freeze()
    try:
        yield gc.get_freeze_count()
    finally:
        gc.unfreeze()
