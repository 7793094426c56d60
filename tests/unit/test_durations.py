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


def test_old_numeric_duration_keys_still_load_as_durations() -> None:
    from watchdog_gpu.config.sections import ProbeSection
    from watchdog_gpu.rules.idle_gpu import IdleGpuConfig
    from watchdog_gpu.rules.low_balance import LowBalanceConfig

    idle = IdleGpuConfig.model_validate({"idle_minutes": 45})
    runway = LowBalanceConfig.model_validate({"min_runway_hours": 2.5})
    probe = ProbeSection.model_validate({"sample_interval_seconds": 2})

    assert (idle.idle, idle.legacy_keys) == (timedelta(minutes=45), ("idle_minutes",))
    assert runway.min_runway == timedelta(hours=2.5)
    assert runway.min_runway_hours == 2.5
    assert (probe.sample_interval_seconds, probe.legacy_keys) == (2, ("sample_interval_seconds",))
    assert IdleGpuConfig.model_validate({"idle": "45m"}).legacy_keys == ()
    assert IdleGpuConfig.model_validate({"idle": "45m"}) == IdleGpuConfig(
        idle=timedelta(minutes=45)
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"idle_minutes": 0}, "idle_minutes must be greater than 0"),
        ({"idle_minutes": "thirty"}, "idle_minutes must be a number of minutes"),
        ({"idle_minutes": True}, "idle_minutes must be a number of minutes"),
        ({"idle_minutes": 5, "idle": "5m"}, "both set"),
        ({"idle": "0s"}, "must be longer than 0s"),
        ({"idle": 30}, "write durations with a unit"),
    ],
)
def test_bad_idle_durations_are_refused(data: dict[str, object], message: str) -> None:
    from pydantic import ValidationError

    from watchdog_gpu.rules.idle_gpu import IdleGpuConfig

    with pytest.raises(ValidationError, match=message):
        IdleGpuConfig.model_validate(data)


@pytest.mark.parametrize("value", ["1.5s", "0s", "61s", "2m"])
def test_the_probe_sample_interval_is_whole_seconds_up_to_a_minute(value: str) -> None:
    from pydantic import ValidationError

    from watchdog_gpu.config.sections import ProbeSection

    with pytest.raises(ValidationError, match="sample_interval"):
        ProbeSection.model_validate({"sample_interval": value})
