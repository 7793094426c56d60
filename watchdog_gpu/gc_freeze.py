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

The young generations keep CPython's thresholds: larger ones cut the remaining collection time
by a further ≈ 15–25 ms a tick at 1,000 instances but raised the peak resident size by ≈ 1 MiB
(bench/README.md), and memory is the scarcer resource on the small machines this runs on.

**Full collections on a schedule** (:func:`full_collections_on_schedule`, :class:`FullCollections`).
CPython also runs a full collection whenever the objects promoted since the last one exceed a
quarter of those that survived it. After the freeze that second number is small, so the
objects a tick keeps (the fleet view's new samples, the stream buffers' runs) trigger one every
second tick at 1,000 instances: ≈ 40 ms each, walking the whole cache, and in the steady cycles
measured they found **nothing** to free (bench/README.md, "Full collections on a schedule"):
cyclic garbage dies young, in the first two generations, which keep their automatic passes.
The daemon turns CPython's full passes off and runs one itself after a job, at most every
:data:`FULL_COLLECTION_INTERVAL` seconds of real time, so a cycle that does become garbage after
surviving two young passes is freed within that interval (then the heap release hands the pages
back: heap_release.py).
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

FULL_COLLECTION_INTERVAL = 600.0  # seconds of real time between the daemon's full collections
# A third threshold no count reaches: CPython then never starts a full collection by itself.
_NO_AUTOMATIC_FULL = 1 << 30


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


class _Schedule:
    """Who holds CPython's full collections off, and the threshold to give back."""

    lock = threading.Lock()
    holders = 0
    saved_third_threshold = 0


@contextmanager
def full_collections_on_schedule() -> Iterator[None]:
    """CPython's automatic full collections off for the block (the young generations keep
    theirs): the caller runs them, with :class:`FullCollections`. Blocks may nest or overlap
    (daemons in one test process): the first sets the threshold, the last restores it."""
    with _Schedule.lock:
        if _Schedule.holders == 0:
            first, second, third = gc.get_threshold()
            _Schedule.saved_third_threshold = third
            gc.set_threshold(first, second, _NO_AUTOMATIC_FULL)
        _Schedule.holders += 1
    try:
        yield
    finally:
        with _Schedule.lock:
            _Schedule.holders -= 1
            if _Schedule.holders == 0:
                first, second, _third = gc.get_threshold()
                gc.set_threshold(first, second, _Schedule.saved_third_threshold)


class FullCollections:
    """Run a full collection after a job, at most once per ``interval`` seconds of
    ``monotonic`` time (the first one ``interval`` after this is made: start-up has just
    collected and frozen everything)."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        *,
        interval: float = FULL_COLLECTION_INTERVAL,
        collect: Callable[[int], int] = gc.collect,
    ) -> None:
        if not interval > 0:
            raise ValueError("interval must be greater than 0")
        self._monotonic = monotonic
        self._interval = interval
        self._collect = collect
        self._lock = threading.Lock()
        self._last = monotonic()
        self.calls = 0
        self.freed = 0  # unreachable objects found by this daemon's full collections

    def after_job(self) -> bool:
        """Collect now if the last one ran ``interval`` ago or more. True when it ran."""
        now = self._monotonic()
        with self._lock:
            if now - self._last < self._interval:
                return False
            self._last = now
        try:
            self.freed += self._collect(2)
        except Exception:  # memory housekeeping must never fail a job
            log.debug("full collection failed", exc_info=True)
            return False
        self.calls += 1
        return True
