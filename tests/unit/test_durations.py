from datetime import timedelta

import pytest

from watchdog_gpu.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("1h30m", timedelta(minutes=90)),
        (" 2h ", timedelta(hours=2)),
        ("0s", timedelta(0)),
        ("1.5h", timedelta(minutes=90)),
    ],
)
def test_durations_parse_the_forms_people_write(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "-5m", "30", "30 minutes", "m30", "1h-5m", "abc"])
def test_bad_durations_are_rejected_with_a_readable_message(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "formatted"),
    [("90s", "1m30s"), ("30m", "30m"), ("24h", "1d"), ("7d", "7d"), ("1d2h3m4s", "1d2h3m4s")],
)
def test_formatting_gives_the_shortest_exact_text(text: str, formatted: str) -> None:
    assert format_duration(parse_duration(text)) == formatted
    assert parse_duration(formatted) == parse_duration(text)
