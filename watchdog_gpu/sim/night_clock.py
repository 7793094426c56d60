"""The clock of ``watchdog-gpu demo``: a night played faster than real time, from a start it
waits at until the daemon runs, to an end where it stops, standing still while a job works."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from watchdog_gpu.clock import Clock


class NightClock:
    """Virtual time ``start + speed × (real time since begin())``, standing still at ``start``
    until :meth:`begin` and at ``end`` from then on (or from :meth:`freeze`): the world stops
    billing there, so the night's figures are exact however long the shutdown takes.

    While any :meth:`hold` is open, ``now()`` stands at the instant the first of them opened and
    then catches up: the daemon's jobs run inside one (``Assembly.job_scope``), so what a job
    lists, calls and records happens at one instant of the night, as on ``simulate``'s virtual
    clock. At 720× a millisecond of real work is 0.7 s of the night: without the hold a listing
    stamped when its job started would show the simulated world a second later, and a destroy
    recorded as accepted at one instant would be billed to another.

    ``monotonic()`` counts virtual seconds since ``begin()`` and never stops (deadlines and retry
    budgets keep running through a hold); ``sleep(s)`` sleeps ``s / speed`` real seconds.
    Thread-safe."""

    def __init__(self, speed: float, *, start: datetime, end: datetime, base: Clock) -> None:
        if not speed > 0:
            raise ValueError("speed must be greater than 0")
        self.speed = float(speed)
        self.start = start
        self._end = end
        self._base = base
        self._origin: float | None = None
        self._holds = 0
        self._held = start
        self._lock = threading.Lock()

    def begin(self, origin: float | None = None) -> None:
        """Let the time run (once; later calls change nothing) from ``origin``, an instant of the
        base clock's ``monotonic()`` (default: now). An origin in the past makes the night
        catch up to it: the demo begins the night from the instant the daemon's schedule counts
        from, so each job runs at or just after its own instant of the night."""
        with self._lock:
            if self._origin is None:
                self._origin = self._base.monotonic() if origin is None else origin

    def monotonic(self) -> float:
        origin = self._origin
        return 0.0 if origin is None else (self._base.monotonic() - origin) * self.speed

    def now(self) -> datetime:
        with self._lock:
            return self._held if self._holds else self._running()

    def _running(self) -> datetime:
        return min(self.start + timedelta(seconds=self.monotonic()), self._end)

    @contextmanager
    def hold(self) -> Iterator[datetime]:
        """Keep ``now()`` standing while inside (nested and concurrent holds share the instant the
        first one opened); yields that instant."""
        with self._lock:
            if not self._holds:
                self._held = self._running()
            self._holds += 1
            held = self._held
        try:
            yield held
        finally:
            with self._lock:
                self._holds -= 1

    def freeze(self) -> datetime:
        """Stop the time now (an interrupted night); returns the instant it stands at."""
        with self._lock:
            instant = self._held if self._holds else self._running()
            self._end = min(self._end, instant)
            return instant

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._base.sleep(seconds / self.speed)
