"""Hand the memory a job freed back to the operating system (glibc's ``malloc_trim``).

Why: CPython serves objects up to 512 bytes from its own pools, but everything larger (the rows
of a fleet view's queries, the lists and dicts of 1,000 instances, SQLite's result buffers,
response bodies) comes from the C library's ``malloc``. glibc gives every thread that allocates
an arena of its own and keeps the pages a job freed in it, for that thread's next allocation:
after a few ticks each scheduler thread that ran an evaluation holds the high-water mark of the
largest one it ran, resident, though free (bench/README.md, "The daemon's memory floor").
``malloc_trim(0)`` gives the free pages of every arena back (glibc ≥ 2.8 also releases pages
inside a heap, not only at its top), for a few milliseconds of CPU.

Where the C library is not glibc (musl, macOS) there is no ``malloc_trim``: releasing does
nothing, the daemon works the same, only its resident set stays higher.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def _libc_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim: Callable[[int], int] = function
    return trim


class HeapRelease:
    """Call ``trim`` after a job, at most once per ``min_interval`` seconds of ``monotonic``
    time: the daemon's jobs run several times a minute and a trim walks every arena, so a burst
    of small jobs (deliveries, polls) shares one."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        *,
        min_interval: float = 10.0,
        trim: Callable[[int], int] | None = None,
    ) -> None:
        self._monotonic = monotonic
        self._min_interval = min_interval
        self._trim = trim
        self._lock = threading.Lock()
        self._last: float | None = None
        self.calls = 0

    @classmethod
    def from_libc(
        cls, monotonic: Callable[[], float], *, min_interval: float = 10.0
    ) -> HeapRelease:
        return cls(monotonic, min_interval=min_interval, trim=_libc_malloc_trim())

    @property
    def available(self) -> bool:
        return self._trim is not None

    def after_job(self) -> bool:
        """Release now unless one ran less than ``min_interval`` ago. True when it ran."""
        if self._trim is None:
            return False
        now = self._monotonic()
        with self._lock:
            if self._last is not None and now - self._last < self._min_interval:
                return False
            self._last = now
        try:
            self._trim(0)
        except Exception:  # memory housekeeping must never fail a job
            log.debug("malloc_trim failed", exc_info=True)
            return False
        self.calls += 1
        return True
