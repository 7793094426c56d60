"""A streamed row's own time: dmon's ``-o DT`` columns, mapped to the watchdog's clock (pure).

A row's instant is its host time plus a per-session offset (the smallest read lag seen), never
after the read that brought it nor before an earlier row; a clock stepping back re-anchors the
offset (:data:`REANCHOR_SECONDS`), and a step forward inside a batch never places rows early.
Rows are stamped later than they happened, never earlier: ``docs/probe.md``, "A row's instant
is its own time".
"""

from __future__ import annotations

from datetime import UTC, datetime

REANCHOR_SECONDS = 5.0
_DATES = 64  # distinct dates remembered (a session sees one a day)
_TIMES = 4096  # distinct times of day remembered (rows of every host, over about an hour)
MIDNIGHTS: dict[str, float] = {}
"""Epoch seconds of each date read (``YYYYMMDD``); :func:`host_seconds`'s, read only."""
# Every GPU of a host, and every host with a synchronised clock, prints the same time each
# second: parsing it once saves most of a row's date/time cost.
TIMES_OF_DAY: dict[str, int] = {}
"""Seconds since midnight of each valid time of day read (``HH:MM:SS``); read only. A date
and a time found in both caches are ``host_seconds(date, time) == MIDNIGHTS[date] +
TIMES_OF_DAY[time]`` (the stream reader reads them inline)."""


def host_seconds(date: str, time: str) -> float | None:
    """Epoch seconds of dmon's ``date`` (``YYYYMMDD``) and ``time`` (``HH:MM:SS``) read as UTC;
    ``None`` when either is not a valid date or time of day (such a row is garbage)."""
    midnight = MIDNIGHTS.get(date)
    if midnight is None:
        midnight = _read_date(date)
        if midnight is None:
            return None
    of_day = TIMES_OF_DAY.get(time)
    if of_day is None:
        of_day = _read_time_of_day(time)
        if of_day is None:
            return None
    return midnight + of_day


def _read_date(date: str) -> float | None:
    """Epoch seconds of the midnight starting ``date`` (remembered), ``None``: not a date."""
    if len(date) != 8 or not (date.isascii() and date.isdigit()):
        return None
    try:
        day = datetime(int(date[:4]), int(date[4:6]), int(date[6:]), tzinfo=UTC)
    except ValueError:
        return None
    if len(MIDNIGHTS) >= _DATES:
        MIDNIGHTS.clear()
    midnight = MIDNIGHTS[date] = day.timestamp()
    return midnight


def _read_time_of_day(time: str) -> int | None:
    """Seconds since midnight of ``time`` (remembered), ``None``: not a time of day."""
    if len(time) != 8 or time[2] != ":" or time[5] != ":":
        return None
    digits = time[:2] + time[3:5] + time[6:]
    if not (digits.isascii() and digits.isdigit()):
        return None
    hours, minutes, seconds = int(digits[:2]), int(digits[2:4]), int(digits[4:])
    if hours > 23 or minutes > 59 or seconds > 59:
        return None
    if len(TIMES_OF_DAY) >= _TIMES:
        TIMES_OF_DAY.clear()
    of_day = TIMES_OF_DAY[time] = hours * 3600 + minutes * 60 + seconds
    return of_day


class HostClockMap:
    """One session's mapping of host times to our clock (see the module docstring)."""

    __slots__ = ("_last", "_stamping", "offset")

    def __init__(self) -> None:
        self.offset: float | None = None
        self._stamping: float | None = None  # the offset this read's rows are stamped with
        self._last = float("-inf")

    def observe(self, read_at: float, newest: float) -> None:
        """A read at ``read_at`` (epoch seconds) whose newest row has host time ``newest``."""
        lag = read_at - newest
        before = self.offset
        after = lag if before is None or lag < before or lag > before + REANCHOR_SECONDS else before
        self.offset = after
        # The larger of the offsets before and after this read (see the module docstring).
        self._stamping = after if before is None else max(before, after)

    def read(self, hosts: list[float | None], read_at: float) -> list[float]:
        """:meth:`observe` a read at ``read_at`` whose rows have host times ``hosts`` (``None``:
        a row without one), then their :meth:`instants`."""
        if None in hosts:
            newest = max((host for host in hosts if host is not None), default=None)
            if newest is not None:
                self.observe(read_at, newest)
            return self.instants(hosts, read_at)
        # Every row dated (every read of a steady stream): stamped here, without a call a row
        # (12 reads a minute of every host).
        dated: list[float] = hosts  # type: ignore[assignment]
        self.observe(read_at, max(dated))
        stamping, last = self._stamping, self._last
        assert stamping is not None
        instants: list[float] = []
        for host in dated:
            at = host + stamping
            if at > read_at:  # noqa: PLR1730 - max(min(…), last) without calls
                at = read_at
            if at > last:  # noqa: PLR1730
                last = at
            instants.append(last)
        self._last = last
        return instants

    def instant(self, host: float, read_at: float) -> float:
        """The instant (epoch seconds) of a row with host time ``host`` read at ``read_at``
        (after :meth:`observe` of that read)."""
        return self.instants([host], read_at)[0]

    def instants(self, hosts: list[float | None], read_at: float) -> list[float]:
        """:meth:`instant` of each row of one read in order (after :meth:`observe` of that
        read); a row without a host time (``None``) is at ``read_at`` and moves nothing."""
        stamping, last = self._stamping, self._last
        instants: list[float] = []
        for host in hosts:
            if host is None:
                instants.append(read_at)
                continue
            # max(min(host + offset, read_at), last), without calls: every read of every host.
            at = host + (read_at - host if stamping is None else stamping)
            if at > read_at:  # noqa: PLR1730 - a call costs more
                at = read_at
            if at > last:  # noqa: PLR1730
                last = at
            instants.append(last)
        self._last = last
        return instants
