"""GPU samples, probe outcomes and each account's latest snapshot for the fleet view, kept in
memory from one load to the next.

A :class:`RecentRows` keeps one append-only table's rows at or after its ``floor`` and reads
only the rows added since (ids above its ``watermark``). SQLite only; why that is exact:
``docs/database.md``, "What the Store keeps in memory, and why that is exact".
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy import Connection, Select, bindparam, func, select
from sqlalchemy.orm import InstrumentedAttribute

from watchdog_gpu.model import ProbeOutcome
from watchdog_gpu.sample_history import SampleHistory
from watchdog_gpu.store.history_queries import PROBES_QUERY, SAMPLES_QUERY
from watchdog_gpu.store.history_rows import (
    PROBE_COLUMNS,
    PROBE_ORDER,
    SAMPLE_COLUMNS,
    SAMPLE_ORDER,
    Entry,
    InstanceKey,
    SampleSeries,
    join_samples,
    probes_from,
    sample_entries,
)
from watchdog_gpu.store.schema import AccountSnapshotRow, GpuSampleRow, ProbeOutcomeRow

T = TypeVar("T")
V = TypeVar("V")  # what a load returns per instance
V_co = TypeVar("V_co", covariant=True)
Build = Callable[[Iterable[Any]], Iterable[Entry[Any]]]  # result rows → entries
SameRun = Callable[[T, T], bool]  # (kept row, newer row): the newer one replaces the kept one
OrderOf = Callable[[T], tuple[Any, ...]]  # a row's place in the table's order, id aside


class Series(Protocol[V_co]):
    """One instance's kept rows, in the table's order."""

    def __len__(self) -> int: ...

    def append(self, at: datetime, item: Any) -> bool:
        """Add a row; False when it belongs before the last one (the series needs sorting)."""
        ...

    def sort(self) -> None: ...

    def between(self, since: datetime, now: datetime) -> V_co | None:
        """The rows with ``since <= at <= now``; None when there are none."""
        ...

    def drop_before(self, since: datetime) -> None: ...


# (instance, rows read before the kept ones, the kept ones) → one instance's result.
Join = Callable[[InstanceKey, list[Any], V | None], V]


@dataclass
class _Series(Generic[T]):
    """One instance's rows in the table's order, as parallel lists. The order is ``order_of``
    (``at`` first) and then the id: rows are appended in id order and sorting is stable, so the
    ids need not be kept (a tuple per row was a fifth of the cache's memory)."""

    order_of: OrderOf[T]
    same_run: SameRun[T] | None = None
    ats: list[datetime] = field(default_factory=list)
    items: list[T] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ats)

    def append(self, at: datetime, item: T) -> bool:
        """Add a row (see :class:`Series`). A row of the same run as a kept one replaces it
        (the run was extended; usually the last one, but rows of one load arrive by ``at``, and
        a late probe may start a run that sorts before the extended one)."""
        items = self.items
        if self.same_run is not None:
            for index in range(len(items) - 1, -1, -1):
                if self.same_run(items[index], item):
                    del self.ats[index], items[index]
                    break
        in_order = not items or self.order_of(items[-1]) <= self.order_of(item)
        self.ats.append(at)
        items.append(item)
        return in_order

    def sort(self) -> None:
        order_of = self.order_of
        rows = sorted(zip(self.ats, self.items, strict=True), key=lambda r: order_of(r[1]))
        self.ats = [row[0] for row in rows]
        self.items = [row[1] for row in rows]

    def between(self, since: datetime, now: datetime) -> tuple[T, ...] | None:
        return tuple(self.items[bisect_left(self.ats, since) : bisect_right(self.ats, now)]) or None

    def drop_before(self, since: datetime) -> None:
        cut = bisect_left(self.ats, since)
        if cut:
            del self.ats[:cut], self.items[:cut]


def _join_tuples(_key: InstanceKey, earlier: list[T], kept: tuple[T, ...] | None) -> tuple[T, ...]:
    return (*earlier, *(kept or ()))


class RecentRows(Generic[V]):
    """The rows of one append-only table with ``at >= floor``, by instance (see module doc)."""

    def __init__(
        self,
        query: Select[*tuple[Any, ...]],
        id_column: InstrumentedAttribute[int],
        at_column: InstrumentedAttribute[datetime],
        build: Build,
        *,
        series: Callable[[InstanceKey], Series[V]],
        join: Join[V],
        order: Callable[[Any], Any],
    ) -> None:
        """``order``: a result row's place in ``query``'s order (a sort key)."""
        # Built once (see fleet_loader): the three reads a load may make. The rows added since
        # the watermark are read by id and sorted here, into the query's order: ordered by
        # ``at`` in SQL, SQLite walks the whole window's ``at`` index to pick out the new
        # rows instead of the ids' range, twice the cost for a tick's new samples.
        self._since = query.where(at_column >= bindparam("since"))
        self._added = (
            query.where(id_column > bindparam("watermark"), at_column >= bindparam("floor"))
            .order_by(None)
            .order_by(id_column)
        )
        self._order = order
        self._gap = query.where(at_column >= bindparam("since"), at_column < bindparam("floor"))
        self._build = build
        self._new_series = series
        self._join = join
        self._lock = threading.Lock()
        self._series: dict[InstanceKey, Series[V]] = {}
        self._floor: datetime | None = None
        self._watermark = 0

    def clear(self) -> None:
        """Forget everything: the next load reads its window afresh."""
        with self._lock:
            self._reset()

    def evict_before(self, cutoff: datetime, *, reset: bool = False) -> None:
        """Forget the rows with ``at < cutoff`` (prune deleted them); the rest stays warm.
        ``reset``: the deletes took the table's newest row, whose id SQLite hands out again
        (a watermark would skip the new row): forget everything."""
        with self._lock:
            if reset:
                self._reset()
            elif self._floor is not None and self._floor < cutoff:
                self._drop_before(cutoff)

    def load(
        self, conn: Connection, since: datetime, now: datetime, newest: int
    ) -> dict[InstanceKey, V]:
        """The rows with ``since <= at <= now`` of every instance, in the table's order, as the
        open transaction of ``conn`` sees them; ``newest`` is the table's highest id in that
        transaction (``FleetHistory.newest_ids``)."""
        with self._lock:
            if self._floor is None or newest < self._watermark:
                self._reset()
                self._floor = since
                self._add(self._build(conn.execute(self._since, {"since": since})))
            elif newest > self._watermark:
                added = {"watermark": self._watermark, "floor": self._floor}
                self._add(self._build(sorted(conn.execute(self._added, added), key=self._order)))
            self._watermark = newest
            floor = self._floor
            # A caller looking further back than the cache keeps reads the difference itself.
            gap = (
                list(self._build(conn.execute(self._gap, {"since": since, "floor": floor})))
                if since < floor
                else []
            )
            result = self._between(since, now, gap)
            if since > floor:
                self._drop_before(since)
            return result

    def _reset(self) -> None:
        self._series = {}
        self._floor = None
        self._watermark = 0

    def _add(self, entries: Iterable[Entry[Any]]) -> None:
        unsorted: set[InstanceKey] = set()
        series = self._series
        for key, at, _order, item in entries:
            target = series.get(key)
            if target is None:
                target = series[key] = self._new_series(key)
            if not target.append(at, item):
                unsorted.add(key)
        for key in unsorted:
            series[key].sort()

    def _between(
        self, since: datetime, now: datetime, gap: list[Entry[Any]]
    ) -> dict[InstanceKey, V]:
        result: dict[InstanceKey, V] = {}
        earlier: dict[InstanceKey, list[Any]] = {}
        # Gap rows all come before the floor, so before every kept row: they go first.
        for key, at, _order, item in gap:
            if at <= now:
                earlier.setdefault(key, []).append(item)
        for key, series in self._series.items():
            if key in earlier:
                continue
            items = series.between(since, now)
            if items is not None:
                result[key] = items
        for key, rows in earlier.items():
            kept = self._series.get(key)
            result[key] = self._join(key, rows, kept.between(since, now) if kept else None)
        return result

    def _drop_before(self, since: datetime) -> None:
        for key in list(self._series):
            series = self._series[key]
            series.drop_before(since)
            if not len(series):
                del self._series[key]
        self._floor = since


SNAPSHOT_COLUMNS = tuple(AccountSnapshotRow.__table__.columns)
_NEWEST_IDS = select(
    select(func.max(GpuSampleRow.id)).scalar_subquery(),
    select(func.max(ProbeOutcomeRow.id)).scalar_subquery(),
    select(func.max(AccountSnapshotRow.id)).scalar_subquery(),
)


@dataclass(frozen=True, slots=True)
class NewestIds:
    """The highest id of each cached table, as one transaction sees them (0: empty table)."""

    samples: int
    probes: int
    snapshots: int


_SNAPSHOTS_AFTER = (
    select(*SNAPSHOT_COLUMNS)
    .where(AccountSnapshotRow.id > bindparam("watermark"))
    .order_by(AccountSnapshotRow.id)
)


class LatestSnapshots:
    """The newest account snapshot row of each account, kept between loads.

    Exact for the same reasons as :class:`RecentRows`, and more simply: snapshot rows are never
    updated, and pruning keeps each account's newest row, so the table's highest id is never
    deleted and ids are never handed out twice.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, Any] = {}
        self._watermark = 0

    def load(self, conn: Connection, newest: int) -> dict[str, Any] | None:
        """Each account's newest snapshot row as ``conn``'s transaction sees it (``newest``: the
        table's highest id there); None when that transaction is older than what is kept (the
        caller then reads the table itself)."""
        with self._lock:
            if newest < self._watermark:
                return None
            if newest > self._watermark:
                for row in conn.execute(_SNAPSHOTS_AFTER, {"watermark": self._watermark}):
                    self._latest[row.account] = row
                self._watermark = newest
            return dict(self._latest)

    def clear(self) -> None:
        with self._lock:
            self._latest = {}
            self._watermark = 0


class FleetHistory:
    """The Store's caches of recent samples and probe outcomes and of each account's latest
    snapshot (one per Store, thread-safe)."""

    def __init__(self) -> None:
        self.snapshots = LatestSnapshots()
        self.samples: RecentRows[SampleHistory] = RecentRows(
            SAMPLES_QUERY,
            GpuSampleRow.id,
            GpuSampleRow.at,
            sample_entries,
            series=SampleSeries,
            join=join_samples,
            order=itemgetter(*(SAMPLE_COLUMNS.index(name) for name in SAMPLE_ORDER)),
        )
        self.probes: RecentRows[tuple[ProbeOutcome, ...]] = RecentRows(
            PROBES_QUERY,
            ProbeOutcomeRow.id,
            ProbeOutcomeRow.at,
            probes_from,
            series=lambda _key: _Series(_probe_order, _same_probe_run),
            join=_join_tuples,
            order=itemgetter(*(PROBE_COLUMNS.index(name) for name in PROBE_ORDER)),
        )

    @staticmethod
    def newest_ids(conn: Connection) -> NewestIds:
        """The highest ids ``conn``'s transaction sees (one read for the three tables)."""
        row = conn.execute(_NEWEST_IDS).one()
        return NewestIds(samples=row[0] or 0, probes=row[1] or 0, snapshots=row[2] or 0)

    def clear(self) -> None:
        """Forget every cached row."""
        self.samples.clear()
        self.probes.clear()
        self.snapshots.clear()


def _probe_order(probe: ProbeOutcome) -> tuple[datetime]:
    return (probe.at,)  # PROBES_QUERY's order, id aside


def _same_probe_run(kept: ProbeOutcome, newer: ProbeOutcome) -> bool:
    return kept.first_at is not None and kept.first_at == newer.first_at
