"""Durations as people write them in configuration and scenarios: ``"90s"``, ``"30m"``, ``"24h"``,
``"7d"``, ``"1h30m"``. Pure; used by the config models and the scenario loader."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BeforeValidator, PlainSerializer

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> timedelta:
    """``"1h30m"`` → 90 minutes. Raises ``ValueError`` with a readable message on bad input,
    including negative durations."""
    cleaned = text.strip().lower().replace(" ", "")
    if cleaned.startswith("-"):
        raise ValueError(f"duration must not be negative: {text!r}")
    if not cleaned:
        raise ValueError("duration is empty; write e.g. '90s', '30m', '24h' or '7d'")
    position = 0
    total = 0.0
    for match in _PART.finditer(cleaned):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(cleaned):
        raise ValueError(
            f"not a duration: {text!r}; write e.g. '90s', '30m', '24h', '7d' or '1h30m'"
        )
    return timedelta(seconds=total)


def format_duration(value: timedelta) -> str:
    """The shortest exact text for ``value`` (``timedelta(minutes=90)`` → ``"1h30m"``)."""
    seconds = round(value.total_seconds())
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _coerce(value: object) -> object:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        # Bare numbers are ambiguous (seconds? minutes?): refuse them so a typo cannot slip in.
        raise ValueError(f"write durations with a unit, e.g. '{value}s' or '{value}m'")
    return value


Duration = Annotated[
    timedelta,
    BeforeValidator(_coerce),
    PlainSerializer(format_duration, return_type=str),
]
"""A pydantic field type: accepts ``"30m"`` etc., serialises back to the same form."""


def _require_positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than 0s")
    return value


PositiveDuration = Annotated[Duration, AfterValidator(_require_positive)]
"""A duration that must be longer than zero (a timeout or an interval of 0 makes no sense)."""


def _known_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(f"unknown time zone {value!r}") from error
    return value


TimeZoneName = Annotated[str, AfterValidator(_known_zone)]
"""A pydantic field type: an IANA time zone name this machine knows (``"Europe/Berlin"``)."""
