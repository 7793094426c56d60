"""The rows the fleet view reads from the two append-only history tables — GPU samples and probe
outcomes — and the domain values built from them (used by ``history`` and ``fleet_loader``;
no database library here). ``SAMPLES_QUERY`` / ``PROBES_QUERY`` (in
``history_queries``) select :data:`SAMPLE_COLUMNS` / :data:`PROBE_COLUMNS`."""

from __future__ import annotations

import sys
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar, cast

from watchdog_gpu.model import ProbeOutcome, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.sample_history import (
    NO_TIME,
    SOURCE_CODES,
    UNKNOWN,
    VERDICT_CODES,
    SampleColumns,
    SampleHistory,
    micros,
)

T = TypeVar("T")
V = TypeVar("V")
InstanceKey = tuple[str, str]  # (account, instance_id)
# One row read: its instance, its ``at``, its place in the table's order, the value built from it.
Entry = tuple[InstanceKey, datetime, tuple[Any, ...], T]

_VERDICTS = {verdict.value: verdict for verdict in Verdict}
_SOURCES = {source.value: source for source in SampleSource}
_STATUSES = {status.value: status for status in ProbeStatus}

# The columns the fleet view reads from each history table, in this order (the row unpacking
# below relies on it): ``history_queries`` and ``fleet_loader`` select them. Columns, not ORM
# entities: a tick may read thousands of samples, and building ORM objects for each was most of
# a tick's time (see bench/).
SAMPLE_COLUMNS = (
    "id",
    "account",
    "instance_id",
    "at",
    "gpu_index",
    "verdict",
    "source",
    "sm",
    "mem",
    "enc",
    "dec",
    "jpg",
    "ofa",
    "covers_from",
)
SAMPLE_ORDER = ("at", "gpu_index", "id")
PROBE_COLUMNS = (
    "id",
    "account",
    "instance_id",
    "at",
    "status",
    "duration_seconds",
    "detail",
    "interactive_login",
    "first_at",
    "repeats",
    "mode",
)
PROBE_ORDER = ("at", "id")


_VERDICT_CODES = {verdict.value: code for verdict, code in VERDICT_CODES.items()}
_SOURCE_CODES = {source.value: code for source, code in SOURCE_CODES.items()}
_DMON = SOURCE_CODES[SampleSource.DMON]


def sample_entries(rows: Iterable[Any]) -> Iterator[Entry[Any]]:
    """Entries of the rows of SAMPLES_QUERY for a :class:`SampleSeries` (the row is the item:
    no sample value is built), one at a time: a cold load reads the whole lookback, and a list
    of its rows was the process's peak memory."""
    for row in rows:
        yield (row[1], row[2]), row[3], (), row


class SampleSeries:
    """One instance's samples as they are read, in compact columns (the Store's cache keeps
    one per instance, see ``store.history``). ``start`` is the first row still kept: dropping
    old rows moves it, and copies the rest into new arrays once most rows are dropped, so the
    arrays a loaded :class:`SampleHistory` reads are only ever appended to."""

    __slots__ = ("account", "columns", "instance_id", "start")

    def __init__(self, key: InstanceKey) -> None:
        self.account, self.instance_id = key
        self.columns = SampleColumns()
        self.start = 0

    def __len__(self) -> int:
        return len(self.columns) - self.start

    def append(self, at: datetime, row: Any) -> bool:
        """Add a row of SAMPLES_QUERY; False when it belongs before the last one."""
        _id, _account, _instance, _at, gpu, verdict, source, sm, mem, enc, dec, jpg, ofa, covers = (
            row
        )
        when = micros(at)
        columns = self.columns
        in_order = len(columns) == self.start or (columns.at[-1], columns.gpu[-1]) <= (when, gpu)
        columns.append(
            when,
            gpu,
            # An unreadable recorded verdict is unknown, never idle.
            verdict=_VERDICT_CODES.get(verdict, UNKNOWN),
            source=_SOURCE_CODES.get(source, _DMON),
            metrics=(sm, mem, enc, dec, jpg, ofa),
            covers_from=NO_TIME if covers is None else micros(covers),
        )
        return in_order

    def sort(self) -> None:
        self.columns = self.columns.copy(self.start).sorted()
        self.start = 0

    def between(self, since: datetime, now: datetime) -> SampleHistory | None:
        at = self.columns.at
        lo = bisect_left(at, micros(since), self.start, len(at))
        hi = bisect_right(at, micros(now), lo, len(at))
        if hi == lo:
            return None
        return SampleHistory(self.account, self.instance_id, self.columns, lo, hi)

    def drop_before(self, since: datetime) -> None:
        at = self.columns.at
        self.start = bisect_left(at, micros(since), self.start, len(at))
        if self.start > _COMPACT_AFTER and 2 * self.start > len(at):
            self.columns = self.columns.copy(self.start)
            self.start = 0

    def history(self) -> SampleHistory:
        return SampleHistory(self.account, self.instance_id, self.columns, self.start)


_COMPACT_AFTER = 64  # dropped rows kept before the arrays are copied (a few minutes' worth)


def join_samples(key: InstanceKey, earlier: list[Any], kept: SampleHistory | None) -> SampleHistory:
    """Rows read before the cache's floor (SAMPLES_QUERY rows, in order) followed by the
    kept ones."""
    series = SampleSeries(key)
    for row in earlier:
        series.append(row[3], row)
    if kept is not None:
        rows = kept.rows()
        series.columns.extend(kept.columns, rows.start, rows.stop)
    return series.history()


def sample_histories(rows: Iterable[Any]) -> dict[InstanceKey, SampleHistory]:
    """The rows of SAMPLES_QUERY (in its order) as each instance's history."""
    series: dict[InstanceKey, SampleSeries] = {}
    for row in rows:
        key = (row[1], row[2])
        target = series.get(key)
        if target is None:
            target = series[key] = SampleSeries(key)
        target.append(row[3], row)
    return {key: target.history() for key, target in series.items()}


def shared() -> Callable[[V], V]:
    """A function returning one object for equal values (within one read): samples of one probe
    share their instant, and utilisation values repeat."""
    seen: dict[Any, Any] = {}

    def same(value: V) -> V:
        if value is None:
            return value
        return cast(V, seen.setdefault(value, value))

    return same


def _shared_keys(rows: Iterable[Any], same: Callable[[Any], Any]) -> Iterator[tuple[Any, ...]]:
    """Rows with their account, instance id and instant shared (the first three after the id);
    account names and instance ids are interned for good: they repeat in every read."""
    for row in rows:
        row_id, account, instance_id, at, *rest = row
        yield (row_id, sys.intern(account), sys.intern(instance_id), same(at), *rest)


def probes_from(rows: Iterable[Any]) -> list[Entry[ProbeOutcome]]:
    """Entries of the rows of PROBES_QUERY (outcomes without their samples), order (at, id);
    each stands for its run of identical probes (``first_at``, ``repeats``)."""
    statuses = _STATUSES
    return [
        (
            (account, instance_id),
            at,
            (at, row_id),
            ProbeOutcome(
                account=account,
                instance_id=instance_id,
                at=at,
                # An unknown stored status raises (ValueError), as ProbeStatus(status) does.
                status=statuses.get(status) or ProbeStatus(status),
                duration_seconds=duration,
                detail=detail,
                interactive_login=interactive,
                first_at=first_at,
                repeats=repeats,
                mode=mode,
            ),
        )
        for (
            row_id,
            account,
            instance_id,
            at,
            status,
            duration,
            detail,
            interactive,
            first_at,
            repeats,
            mode,
        ) in _shared_keys(rows, shared())
    ]


def by_instance(entries: list[Entry[T]]) -> dict[InstanceKey, tuple[T, ...]]:
    """The entries' items grouped by instance, in the entries' order."""
    grouped: dict[InstanceKey, list[T]] = defaultdict(list)
    for key, _at, _order, item in entries:
        grouped[key].append(item)
    return {key: tuple(items) for key, items in grouped.items()}
