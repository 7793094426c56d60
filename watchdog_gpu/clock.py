"""Time, behind one seam.

This is the only module that reads real time (a ruff banned-API rule enforces it). Everything
else takes a :class:`Clock` and reads ``now()`` once per tick, so the simulator, the scenario
runner and the tests drive the same code on a virtual clock.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Aware-UTC wall time, monotonic time for intervals, and an interruptible sleep."""

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards (for deadlines)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a virtual clock advances instead of waiting)."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock:
    """A clock that only moves when told to; ``sleep`` advances it instantly.

    Thread-safe, because the simulator's HTTP servers and the daemon read it from several threads.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("VirtualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._origin = self._now
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return (self._now - self._origin).total_seconds()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(timedelta(seconds=seconds))

    def advance(self, delta: timedelta) -> datetime:
        """Move time forward by ``delta`` (never backwards) and return the new instant."""
        if delta < timedelta(0):
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now += delta
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to ``instant`` (must not be earlier than now)."""
        with self._lock:
            target = instant.astimezone(UTC)
            if target < self._now:
                raise ValueError("a clock does not go backwards")
            self._now = target
