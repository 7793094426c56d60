"""The spend digest's schedule and configuration (digest.py): when a period falls due, in the
local time of its zone, and which period it covers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from watchdog_gpu.config import NotifySection
from watchdog_gpu.digest import DigestConfig, digest_key, digest_window, latest_due, next_due


def config(**values: Any) -> DigestConfig:
    return DigestConfig.model_validate(values)


def test_the_digest_is_off_unless_configured() -> None:
    assert not NotifySection().digest.enabled
    assert latest_due(DigestConfig(), datetime(2026, 12, 4, 9, tzinfo=UTC)) is None


def test_a_daily_digest_falls_due_at_its_local_time_and_covers_the_day_before() -> None:
    daily = config(every="daily", at="08:00", timezone="Europe/Berlin")  # UTC+1 in December

    before = latest_due(daily, datetime(2026, 12, 4, 6, 59, tzinfo=UTC))
    at = latest_due(daily, datetime(2026, 12, 4, 7, 0, tzinfo=UTC))

    assert before == datetime(2026, 12, 3, 7, 0, tzinfo=UTC)
    assert at == datetime(2026, 12, 4, 7, 0, tzinfo=UTC)
    assert at is not None
    assert digest_window(daily, at) == (datetime(2026, 12, 3, 7, 0, tzinfo=UTC), at)
    assert next_due(daily, at) == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)


def test_a_weekly_digest_falls_due_on_its_weekday_and_covers_the_week_before() -> None:
    weekly = config(every="weekly", at="08:00", weekday="monday", timezone="UTC")
    friday = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)  # 2026-12-04 is a Friday

    due = latest_due(weekly, friday)

    assert due == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)  # the Monday before
    assert digest_window(weekly, due) == (due - timedelta(days=7), due)
    assert latest_due(weekly, datetime(2026, 11, 30, 7, 59, tzinfo=UTC)) == due - timedelta(7)
    assert next_due(weekly, friday) == datetime(2026, 12, 7, 8, 0, tzinfo=UTC)


def test_a_day_with_a_dst_change_is_23_hours_long_in_local_time() -> None:
    daily = config(every="daily", at="08:00", timezone="Europe/Berlin")

    due = latest_due(daily, datetime(2026, 3, 29, 12, 0, tzinfo=UTC))  # clocks went forward

    assert due == datetime(2026, 3, 29, 6, 0, tzinfo=UTC)  # 08:00 CEST
    start, end = digest_window(daily, due)
    assert end - start == timedelta(hours=23)


def test_each_period_has_its_own_key() -> None:
    daily = config(every="daily", at="08:00")
    first = latest_due(daily, datetime(2026, 12, 4, 9, tzinfo=UTC))
    second = latest_due(daily, datetime(2026, 12, 5, 9, tzinfo=UTC))
    again = latest_due(daily, datetime(2026, 12, 5, 7, tzinfo=UTC))
    assert first is not None
    assert second is not None
    assert again is not None
    assert digest_key(first) != digest_key(second)
    assert digest_key(first) == digest_key(again)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"every": "daily", "at": "8am"}, "not a time of day"),
        ({"every": "daily", "at": "24:00"}, "not a time of day"),
        ({"every": "daily", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"every": "hourly"}, "every"),
        ({"every": "weekly", "weekday": "funday"}, "weekday"),
        ({"every": "daily", "hour": 8}, "hour"),
    ],
)
def test_a_bad_digest_setting_is_a_config_error(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        config(**values)
