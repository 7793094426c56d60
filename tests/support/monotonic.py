"""A monotonic clock the test moves by hand (``now``), for pacers such as the heap release."""

from __future__ import annotations


class HandMonotonic:
    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now
