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

**Between jobs** (:class:`CollectBetweenJobs`) the same idea covers what the daemon builds as
it runs: the fleet view's caches, the stream buffers, the per-instance state of the rules — most
of what lives past a tick lives for many. After a job (at most every ``min_interval`` seconds)
``gc.collect()`` walks only what is not frozen, i.e. what was made since the previous pass, frees
its garbage, and ``gc.freeze()`` sets the survivors aside; every ``full_every`` seconds a pass
unfreezes everything first, so garbage that involves an object frozen while it was alive (a
closed paramiko ``Transport``, which refers to itself) waits at most that long. Meanwhile
CPython's own full collections, which walked every live object of the process each time (at
5,000 instances ≈ 220 ms each, one or two a tick: bench/README.md, "Full collections between
jobs"), are reduced to a rare backstop (``BACKSTOP``); its young generations run as before.

The young generations' thresholds stay at CPython's defaults: larger ones cut the remaining
collection time by a further ≈ 15–25 ms a tick at 1,000 instances but raised the peak resident
size by ≈ 1 MiB (bench/README.md), and memory is the scarcer resource on the small machines this
runs on.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

BACKSTOP = 1000
"""Young collections between two of CPython's own full collections while
:class:`CollectBetweenJobs` is active (its default: 10). A backstop for a daemon whose jobs
stopped: a full collection every few hours at 1,000 instances instead of every other tick."""


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


class CollectBetweenJobs:
    """Full collections of what the jobs made, between jobs; the survivors frozen (module doc).

    :meth:`after_job` does nothing unless :meth:`active` (a context manager) is in force: a
    test that builds a daemon in-process keeps CPython's collector as it was. Thread-safe:
    jobs end on several threads."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        *,
        min_interval: float = 10.0,
        full_every: float = 600.0,
    ) -> None:
        self._monotonic = monotonic
        self._min_interval = min_interval
        self._full_every = full_every
        self._lock = threading.Lock()
        self._active = False
        self._last: float | None = None
        self._last_full: float | None = None
        self.passes = 0
        self.full_passes = 0

    @contextmanager
    def active(self) -> Iterator[None]:
        """CPython's full collections reduced to the backstop for the block; restored after,
        and everything frozen given back to the collector (``gc.unfreeze``)."""
        threshold0, threshold1, threshold2 = gc.get_threshold()
        gc.set_threshold(threshold0, threshold1, max(threshold2, BACKSTOP))
        now = self._monotonic()
        with self._lock:
            self._active, self._last, self._last_full = True, now, now
        try:
            yield
        finally:
            with self._lock:
                self._active = False
            gc.set_threshold(threshold0, threshold1, threshold2)
            gc.unfreeze()

    def after_job(self) -> bool:
        """Collect and freeze now, unless a pass ran less than ``min_interval`` ago or the
        collector is not :meth:`active`. True when a pass ran."""
        now = self._monotonic()
        with self._lock:
            if not self._active or (
                self._last is not None and now - self._last < self._min_interval
            ):
                return False
            self._last = now
            full = self._last_full is None or now - self._last_full >= self._full_every
            if full:
                self._last_full = now
                # Objects frozen while alive may be garbage by now: everything is walked.
                gc.unfreeze()
                self.full_passes += 1
            gc.collect()
            gc.freeze()
            self.passes += 1
        return True
