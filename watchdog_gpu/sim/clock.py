"""A clock that runs faster than real time, so the demo can play a night in a minute.

``AcceleratedClock(speed=60)`` reports ``start + 60 × (real seconds elapsed)``: one real second is
one virtual minute. It reads real time only through another :class:`~watchdog_gpu.clock.Clock`
(the system clock by default), so it needs no exemption from the "real time only in clock.py"
rule, and tests can drive it from a virtual base clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from watchdog_gpu.clock import Clock, SystemClock


class AcceleratedClock:
    """Virtual time = ``start`` + ``speed`` × real time elapsed since construction.

    ``sleep(seconds)`` sleeps ``seconds / speed`` real seconds, so code that sleeps a virtual
    minute wakes after a virtual minute. Thread-safe (it holds no mutable state).
    """

    def __init__(
        self, speed: float, *, start: datetime | None = None, base: Clock | None = None
    ) -> None:
        if not speed > 0:
            raise ValueError("speed must be greater than 0")
        if start is not None and start.tzinfo is None:
            raise ValueError("AcceleratedClock needs an aware start")
        self.speed = float(speed)
        self._base = base if base is not None else SystemClock()
        self._origin_monotonic = self._base.monotonic()
        self._start = (start if start is not None else self._base.now()).astimezone(UTC)

    @property
    def start(self) -> datetime:
        return self._start

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self.monotonic())

    def monotonic(self) -> float:
        return (self._base.monotonic() - self._origin_monotonic) * self.speed

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._base.sleep(seconds / self.speed)
