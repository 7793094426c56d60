from datetime import UTC, datetime, timedelta

import pytest

from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.sim.clock import AcceleratedClock

REAL_START = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)


def test_virtual_time_runs_speed_times_faster_than_the_base_clock() -> None:
    base = VirtualClock(REAL_START)
    clock = AcceleratedClock(60, base=base)

    base.advance(timedelta(seconds=10))

    assert clock.now() == REAL_START + timedelta(minutes=10)
    assert clock.monotonic() == pytest.approx(600)


def test_an_explicit_start_is_offset_zero() -> None:
    base = VirtualClock(REAL_START)
    virtual_start = datetime(2030, 1, 1, tzinfo=UTC)
    clock = AcceleratedClock(3600, start=virtual_start, base=base)

    base.advance(timedelta(seconds=12))

    assert clock.now() == virtual_start + timedelta(hours=12)
    assert clock.start == virtual_start


def test_sleeping_a_virtual_minute_sleeps_a_real_second_at_speed_60() -> None:
    base = VirtualClock(REAL_START)
    clock = AcceleratedClock(60, base=base)

    clock.sleep(60)

    assert base.now() == REAL_START + timedelta(seconds=1)
    assert clock.now() == REAL_START + timedelta(minutes=1)


@pytest.mark.parametrize("speed", [0, -1])
def test_speed_must_be_positive(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        AcceleratedClock(speed)


def test_a_naive_start_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        AcceleratedClock(2, start=datetime(2026, 1, 1))


def test_the_default_base_is_real_time_and_gives_aware_utc() -> None:
    now = AcceleratedClock(1000).now()
    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)
