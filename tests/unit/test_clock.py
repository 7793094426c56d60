from datetime import UTC, datetime, timedelta

import pytest

from watchdog_gpu.clock import SystemClock, VirtualClock

START = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)


def test_virtual_clock_sleep_advances_time_instantly() -> None:
    clock = VirtualClock(START)
    clock.sleep(90)
    assert clock.now() == START + timedelta(seconds=90)
    assert clock.monotonic() == 90


def test_virtual_clock_never_goes_backwards() -> None:
    clock = VirtualClock(START)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(timedelta(seconds=-1))
    with pytest.raises(ValueError, match="backwards"):
        clock.set(START - timedelta(seconds=1))


def test_virtual_clock_refuses_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="aware"):
        VirtualClock(datetime(2026, 3, 2))


def test_system_clock_gives_aware_utc() -> None:
    now = SystemClock().now()
    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)
