"""The leader's lease as the configuration and ``status`` state it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from watchdog_gpu.commands.status import _leader_line
from watchdog_gpu.config import WatchdogSection
from watchdog_gpu.errors import ConfigError
from watchdog_gpu.store.rows import DEFAULT_LEADER_LEASE_SECONDS, Leader

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_the_configured_default_lease_is_the_one_status_judges_by() -> None:
    assert WatchdogSection().leader_lease == timedelta(seconds=DEFAULT_LEADER_LEASE_SECONDS)


@pytest.mark.parametrize("value", ["1s", "0s", "11m"])
def test_a_lease_too_short_to_renew_or_too_long_to_matter_is_refused(value: str) -> None:
    with pytest.raises((ConfigError, ValueError)):
        WatchdogSection(leader_lease=value)


def test_status_shows_a_heartbeat_to_the_second_and_flags_one_older_than_the_lease() -> None:
    def line(seconds: int) -> str:
        renewed = NOW - timedelta(seconds=seconds)
        return _leader_line(Leader(node="vps-1", epoch=3, since=renewed, renewed_at=renewed), NOW)

    assert "last heartbeat 4 s ago)" in line(4)
    assert "frozen or cut off" not in line(4)
    assert "last heartbeat 56 s ago; silent longer than a lease" in line(56)
