"""The spend digest (pure): when it is due and what it says.

``[notify.digest]`` (opt-in) has the daemon push a short version of ``watchdog-gpu report``
daily or weekly at a local time. Each period is one notification whose idempotency key is the
instant it fell due (``digest:<ISO time>``): the daemon enqueues the latest due period's digest
into the notification outbox unless that key is there already, so a digest goes out once per
period — late, once, after a restart or a laptop's sleep over its time, never twice.

Example::

    [notify.digest]
    every = "weekly"        # "off" (default), "daily" or "weekly"
    at = "08:00"            # local time of day
    weekday = "monday"      # weekly only
    timezone = "Europe/Berlin"
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import Field, field_validator

from watchdog_gpu.durations import TimeZoneName
from watchdog_gpu.model import PlannedNotification, Severity
from watchdog_gpu.notify.render import format_usd
from watchdog_gpu.rules.base import StrictModel
from watchdog_gpu.spend_report import Report, unknown_hours, verified_stops

DIGEST_RULE = "digest"
KEY_PREFIX = "digest:"
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
Weekday = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_CLOCK = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
# At most this many account lines in the message: a phone shows the first few.
MAX_ACCOUNT_LINES = 5


class DigestConfig(StrictModel):
    """``[notify.digest]``: a short spend report pushed daily or weekly (off by default)."""

    every: Literal["off", "daily", "weekly"] = Field(
        default="off",
        description=(
            '"off", "daily" (the 24 hours before `at`) or "weekly" (the 7 days before `at` '
            "on `weekday`)."
        ),
    )
    at: str = Field(default="08:00", description="Local time of day, HH:MM, in `timezone`.")
    weekday: Weekday = Field(default="monday", description="The day a weekly digest goes out.")
    timezone: TimeZoneName = Field(default="UTC", description="The zone of `at` and `weekday`.")
    severity: Literal["info", "warning", "critical"] = Field(
        default="info",
        description=(
            "Sent with this severity: a route receives it when its severities include it."
        ),
    )

    @field_validator("at")
    @classmethod
    def _clock_time(cls, value: str) -> str:
        if not _CLOCK.fullmatch(value):
            raise ValueError(f"{value!r} is not a time of day like 08:00")
        return value

    @property
    def enabled(self) -> bool:
        return self.every != "off"

    def describe(self) -> str:
        """``off``, ``daily at 08:00 UTC`` or ``weekly on monday at 08:00 Europe/Berlin``."""
        if not self.enabled:
            return "off"
        day = f" on {self.weekday}" if self.every == "weekly" else ""
        return f"{self.every}{day} at {self.at} {self.timezone} ({self.severity})"

    @property
    def time_of_day(self) -> time:
        hours, minutes = self.at.split(":")
        return time(int(hours), int(minutes))


def _local(config: DigestConfig, day: date) -> datetime:
    """``config.at`` on ``day`` in its zone, as an aware instant (a time a DST change skips
    resolves with the offset before the change, as ``zoneinfo`` does)."""
    local = datetime.combine(day, config.time_of_day, tzinfo=ZoneInfo(config.timezone))
    return local.astimezone(UTC)


def _local_date(config: DigestConfig, moment: datetime) -> date:
    return moment.astimezone(ZoneInfo(config.timezone)).date()


def _step_days(config: DigestConfig) -> int:
    return 7 if config.every == "weekly" else 1


def latest_due(config: DigestConfig, now: datetime) -> datetime | None:
    """The latest instant at or before ``now`` a digest fell due (None when it is off)."""
    if not config.enabled:
        return None
    today = _local_date(config, now)
    if config.every == "weekly":
        back = (today.weekday() - WEEKDAYS.index(config.weekday)) % 7
        day = today - timedelta(days=back)
    else:
        day = today
    while _local(config, day) > now:
        day -= timedelta(days=_step_days(config))
    return _local(config, day)


def next_due(config: DigestConfig, now: datetime) -> datetime | None:
    """The first instant after ``now`` a digest falls due (None when it is off)."""
    due = latest_due(config, now)
    if due is None:
        return None
    day = _local_date(config, due) + timedelta(days=_step_days(config))
    return _local(config, day)


def digest_window(config: DigestConfig, due: datetime) -> tuple[datetime, datetime]:
    """The period a digest due at ``due`` covers: from the previous due instant to ``due``."""
    previous = _local_date(config, due) - timedelta(days=_step_days(config))
    return _local(config, previous), due


def digest_key(due: datetime) -> str:
    """The outbox key of the digest due at ``due`` (one per period)."""
    return f"{KEY_PREFIX}{due.isoformat()}"


def digest_notification(
    report: Report, config: DigestConfig, due: datetime, *, created_at: datetime
) -> PlannedNotification:
    """The phone message of ``report`` (the period of the digest due at ``due``)."""
    period = "day" if config.every == "daily" else "week"
    total = report.total
    zone = ZoneInfo(config.timezone)
    start, end = report.start.astimezone(zone), report.end.astimezone(zone)
    title = f"Spend digest: {format_usd(total.usd)} this {period}"
    lines = [
        f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} {config.timezone}: "
        f"spent {format_usd(total.usd)}"
        + (f" (estimated {format_usd(total.estimated_usd)})" if total.estimated_usd else "")
        + (f", {unknown_hours(total):.1f} h at unknown cost" if total.unknown_seconds else "")
    ]
    split = report.activity
    lines.append(
        f"GPUs idle: {format_usd(split.idle_usd)} ({split.idle_gpu_hours:.1f} GPU-h); "
        f"blind {format_usd(split.blind_usd)}, busy {format_usd(split.busy_usd)}"
    )
    rows = sorted(report.rows, key=lambda row: -row.spend.usd)
    for row in rows[:MAX_ACCOUNT_LINES]:
        lines.append(f"{row.key['account']} ({row.key['provider']}): {format_usd(row.spend.usd)}")
    if len(rows) > MAX_ACCOUNT_LINES:
        lines.append(f"and {len(rows) - MAX_ACCOUNT_LINES} more accounts")
    stops = verified_stops(report)
    if stops:
        lines.append(
            f"{len(stops)} stop/destroy verified; estimated saving to the period's end "
            f"{format_usd(report.estimated_saving_usd)} (an estimate, not a bill)"
        )
    else:
        lines.append("no stop or destroy in this period")
    lines.append(
        f"Details: watchdog-gpu report --since {report.start.isoformat()} "
        f"--until {report.end.isoformat()}"
    )
    return PlannedNotification(
        idempotency_key=digest_key(due),
        severity=Severity(config.severity),
        title=title,
        body="\n".join(lines),
        created_at=created_at,
        rule=DIGEST_RULE,
    )
