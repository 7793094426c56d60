"""Keep the objects that live as long as the process out of the garbage collector's full passes.

CPython's full collections walk every tracked container; a daemon's start-up objects (modules,
configuration, wiring) and most of what outlives a tick never become garbage, and walking them
was most of a tick's collection time. :func:`long_lived_frozen` freezes what start-up built and
unfreezes on the way out; :class:`CollectBetweenJobs` collects and freezes the survivors after
jobs, with a periodic full pass so garbage tied to a frozen object (a closed paramiko
``Transport``) waits at most ``full_every``, and leaves CPython's own full collections as a
rare backstop. The young generations keep CPython's thresholds: larger ones cost peak memory.
Figures: ``bench/README.md``, "A cycle over 1,000 instances" and "Garbage under an outage".
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
