"""The clock of ``watchdog-gpu demo``: a night played faster than real time, from a start it
waits at until the daemon runs, to an end where it stops."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from watchdog_gpu.clock import Clock


class NightClock:
    """Virtual time ``start + speed × (real time since begin())``, standing still at ``start``
    until :meth:`begin` and at ``end`` from then on (or from :meth:`freeze`): the world stops
    billing there, so the night's figures are exact however long the shutdown takes.
    ``monotonic()`` counts virtual seconds since ``begin()`` and never stops; ``sleep(s)`` sleeps
    ``s / speed`` real seconds. Thread-safe."""

    def __init__(self, speed: float, *, start: datetime, end: datetime, base: Clock) -> None:
        if not speed > 0:
            raise ValueError("speed must be greater than 0")
        self.speed = float(speed)
        self.start = start
        self._end = end
        self._base = base
        self._origin: float | None = None
        self._lock = threading.Lock()

    def begin(self) -> None:
        """Let the time run (once; later calls change nothing)."""
        with self._lock:
            if self._origin is None:
                self._origin = self._base.monotonic()

    def monotonic(self) -> float:
        origin = self._origin
        return 0.0 if origin is None else (self._base.monotonic() - origin) * self.speed

    def now(self) -> datetime:
        running = self.start + timedelta(seconds=self.monotonic())
        with self._lock:
            return min(running, self._end)

    def freeze(self) -> datetime:
        """Stop the time now (an interrupted night); returns the instant it stands at."""
        instant = self.now()
        with self._lock:
            self._end = min(self._end, instant)
        return instant

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._base.sleep(seconds / self.speed)
