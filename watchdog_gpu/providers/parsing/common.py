"""Helpers every provider parser shares: defensive field readers and the state table.

Provider payloads are untrusted input. A reader here never raises on a wrong type: it returns
``None`` ("not known"), and the parser decides whether that makes the whole payload unusable
(``PermanentError``) or only one field unknown. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from watchdog_gpu.errors import PermanentError
from watchdog_gpu.model import InstanceState

# Hours in a billing month where a provider quotes storage in $/GB/month and does not say how it
# divides (RunPod): 365 × 24 / 12 = 730. Vast and Lambda say 720 (docs/providers.md).
HOURS_PER_MONTH = 730.0

# How much of a payload an error message may quote.
_EXCERPT_CHARS = 120


@dataclass(frozen=True, slots=True)
class StateTable:
    """One provider's raw-state → normalised-state table, with an explicit ``unknown`` fallback.

    Lookups are case-insensitive and ignore surrounding whitespace; anything the table does not
    list (a new provider state, a null, a number) maps to ``InstanceState.UNKNOWN`` — never a
    crash and never "idle".
    """

    provider: str
    entries: Mapping[str, InstanceState]

    def __post_init__(self) -> None:
        normalised = {key.strip().lower(): state for key, state in self.entries.items()}
        object.__setattr__(self, "entries", normalised)

    def lookup(self, raw: object) -> InstanceState:
        """The normalised state for ``raw`` (any JSON value); ``UNKNOWN`` when unlisted."""
        if not isinstance(raw, str):
            return InstanceState.UNKNOWN
        return self.entries.get(raw.strip().lower(), InstanceState.UNKNOWN)


def broken_payload(provider: str, what: str, detail: str) -> PermanentError:
    """A ``PermanentError`` for a payload we cannot read (quoting at most a short excerpt)."""
    return PermanentError(f"{provider}: unexpected {what} payload: {detail[:_EXCERPT_CHARS]}")


def describe(value: object) -> str:
    """A short human description of a JSON value's type, for error messages (never the value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def as_object(value: object) -> Mapping[str, object] | None:
    """``value`` if it is a JSON object with string keys, else ``None``."""
    if not isinstance(value, dict):
        return None
    # The keys' types gathered in C (a parse reads every object of every listing); only a
    # dict with another type of key is looked at key by key (a str subclass is a string).
    if set(map(type, value)) <= _STR_ONLY or all(isinstance(key, str) for key in value):
        return value
    return None


_STR_ONLY = frozenset({str})


def as_list(value: object) -> list[object] | None:
    """``value`` if it is a JSON array, else ``None``."""
    return value if isinstance(value, list) else None


def get_str(row: Mapping[str, object], key: str) -> str | None:
    """A non-empty string field with surrounding whitespace stripped (Vast hosts pad some
    values), else ``None``."""
    value = row.get(key)
    if isinstance(value, str):
        stripped = value.strip()
        return stripped or None
    return None


def get_float(row: Mapping[str, object], key: str) -> float | None:
    """A finite number field (booleans are not numbers), else ``None``."""
    return as_float(row.get(key))


def as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def get_money(row: Mapping[str, object], key: str) -> float | None:
    """A non-negative finite amount or rate, else ``None`` (a negative price is nonsense, and
    an unknown price must stay unknown rather than become zero)."""
    value = get_float(row, key)
    return value if value is not None and value >= 0 else None


def get_int(row: Mapping[str, object], key: str) -> int | None:
    """A whole non-negative number (``2`` or ``2.0``), else ``None``."""
    value = get_float(row, key)
    if value is None or value < 0 or not value.is_integer():
        return None
    return int(value)


def get_bool(row: Mapping[str, object], key: str) -> bool | None:
    """A JSON boolean, or 0/1 (Vast sends some flags as integers), else ``None``."""
    value = row.get(key)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    return None


def get_id(row: Mapping[str, object], key: str) -> str | None:
    """An identifier given as a non-empty string or an integer, as text; else ``None``."""
    value = row.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def epoch_to_datetime(value: object) -> datetime | None:
    """Unix seconds to an aware UTC datetime; ``None`` for anything that is not a plausible
    timestamp (missing, wrong type, zero/negative, absurdly far in the future)."""
    seconds = as_float(value)
    if seconds is None or seconds <= 0 or seconds > 32_503_680_000:  # year 3000
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


def parse_iso_datetime(value: object) -> datetime | None:
    """An ISO-8601 timestamp (``Z`` or an offset) to aware UTC; naive or invalid → ``None``."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)


def seconds_before(now: datetime, seconds: float | None) -> datetime | None:
    """``now`` minus an uptime in seconds (whole seconds), or ``None`` when it is unknown."""
    if seconds is None or seconds < 0:
        return None
    try:
        return (now - timedelta(seconds=round(seconds))).replace(microsecond=0)
    except OverflowError:
        return None


def monthly_gb_rate_to_hourly(size_gb: float, usd_per_gb_month: float, hours: float) -> float:
    """Dollars per hour for ``size_gb`` billed at ``usd_per_gb_month`` over ``hours`` a month."""
    return round(size_gb * usd_per_gb_month / hours, 9)


def key_comment(public_key: str) -> str:
    """The comment of an OpenSSH public key line (``ssh-ed25519 AAAA… ops@laptop`` →
    ``ops@laptop``), or ``""`` when it has none."""
    parts = public_key.split(None, 2)
    return parts[2].strip() if len(parts) == 3 else ""


def as_port(value: object) -> int | None:
    """A TCP port given as an integer or a digit string (``"41022"``), else ``None``."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
        return value
    return None
