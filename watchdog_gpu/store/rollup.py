"""Rolling raw GPU samples older than a few hours up into hourly counts (``gpu_sample_rollups``).

Nothing but the rules reads raw samples, and only inside their lookback, while a day of them at
1,000 instances would pass the size the whole database may take. So raw samples are kept
``RAW_SAMPLES_FOR`` (``watchdog.raw_sample_retention``), then each GPU's hour becomes one row of
busy, idle and unknown counts and the highest utilisation. ``docs/database.md``, "How big it gets".
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Executable,
    Table,
    bindparam,
    delete,
    func,
    insert,
    select,
)

from watchdog_gpu.model import Verdict
from watchdog_gpu.store.schema import GpuSampleRollupRow, GpuSampleRow

HOUR = timedelta(hours=1)
# Raw samples are kept at least this long (and at least as long as the rules look back): the
# default of ``watchdog.raw_sample_retention`` (config/sections.py keeps the same value).
RAW_SAMPLES_FOR = timedelta(hours=2)

SAMPLES = cast(Table, GpuSampleRow.__table__)
ROLLUPS = cast(Table, GpuSampleRollupRow.__table__)

_OLDEST_SAMPLE = select(func.min(SAMPLES.c.at)).where(SAMPLES.c.at >= bindparam("since"))
_IN_HOUR = (SAMPLES.c.at >= bindparam("start")) & (SAMPLES.c.at < bindparam("end"))
_HOUR_OF_SAMPLES = select(
    SAMPLES.c.account,
    SAMPLES.c.instance_id,
    SAMPLES.c.gpu_index,
    SAMPLES.c.source,
    SAMPLES.c.at,
    SAMPLES.c.verdict,
    SAMPLES.c.sm,
    SAMPLES.c.mem,
).where(_IN_HOUR)
_DELETE_HOUR = delete(SAMPLES).where(_IN_HOUR)
_INSERT_ROLLUPS = insert(ROLLUPS)


def hour_of(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


@dataclass
class _Hour:
    """One GPU's samples of one hour, being counted."""

    first_at: datetime
    last_at: datetime
    samples: int = 0
    busy: int = 0
    idle: int = 0
    unknown: int = 0
    sm_max: float | None = None
    mem_max: float | None = None

    def add(self, at: datetime, verdict: str, sm: float | None, mem: float | None) -> None:
        self.first_at = min(self.first_at, at)
        self.last_at = max(self.last_at, at)
        self.samples += 1
        if verdict == Verdict.BUSY.value:
            self.busy += 1
        elif verdict == Verdict.IDLE.value:
            self.idle += 1
        else:  # unknown, or a verdict this version cannot read: never idle
            self.unknown += 1
        if sm is not None:
            self.sm_max = sm if self.sm_max is None else max(self.sm_max, sm)
        if mem is not None:
            self.mem_max = mem if self.mem_max is None else max(self.mem_max, mem)


@dataclass(frozen=True, slots=True)
class Deleted:
    """Rows one deleting step removed, and whether they included the table's newest row (its
    id is then handed out again by SQLite: caches keyed by id must start over)."""

    rows: int = 0
    newest: bool = False

    def __add__(self, other: Deleted) -> Deleted:
        return Deleted(self.rows + other.rows, self.newest or other.newest)


def delete_rows(
    conn: Connection, table: Table, statement: Executable, params: dict[str, Any] | None = None
) -> Deleted:
    """Run a DELETE on ``table`` and tell whether it took the newest row (same transaction)."""
    newest = select(func.max(table.c.id))
    before = conn.execute(newest).scalar() or 0
    result = conn.execute(statement, params)
    after = conn.execute(newest).scalar() or 0
    return Deleted(int(cast(Any, result).rowcount or 0), after < before)


def roll_up(
    transaction: Callable[[], AbstractContextManager[Connection]],
    since: datetime,
    before: datetime,
) -> tuple[Deleted, int]:
    """Replace the samples from ``since`` of every whole hour before ``before`` (rounded down to
    the hour) by their hourly counts, one hour per ``transaction()`` (the Store's write
    transactions). Returns the samples removed and the rollup rows written."""
    end = hour_of(before)
    removed = Deleted()
    written = 0
    while True:
        with transaction() as conn:
            oldest = conn.execute(_OLDEST_SAMPLE, {"since": since}).scalar()
            if oldest is None:
                break
            start = max(since, hour_of(_aware(oldest)))
            stop = hour_of(start) + HOUR
            if stop > end:
                break
            window = {"start": start, "end": stop}
            rows = _count_hour(conn, window)
            if rows:
                conn.execute(_INSERT_ROLLUPS, rows)
            removed += delete_rows(conn, SAMPLES, _DELETE_HOUR, window)
        written += len(rows)
    return removed, written


def _count_hour(conn: Connection, window: dict[str, datetime]) -> list[dict[str, Any]]:
    hours: dict[tuple[str, str, int, str], _Hour] = {}
    start = hour_of(window["start"])
    for account, instance_id, gpu, source, at, verdict, sm, mem in conn.execute(
        _HOUR_OF_SAMPLES, window
    ):
        key = (account, instance_id, gpu, source)
        counted = hours.get(key)
        if counted is None:
            counted = hours[key] = _Hour(first_at=at, last_at=at)
        counted.add(at, verdict, sm, mem)
    return [
        {
            "account": account,
            "instance_id": instance_id,
            "gpu_index": gpu,
            "source": source,
            "hour": start,
            "first_at": counted.first_at,
            "last_at": counted.last_at,
            "samples": counted.samples,
            "busy": counted.busy,
            "idle": counted.idle,
            "unknown": counted.unknown,
            "sm_max": counted.sm_max,
            "mem_max": counted.mem_max,
        }
        for (account, instance_id, gpu, source), counted in sorted(hours.items())
    ]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class GpuHour:
    """One GPU's samples of one hour, counted (see module doc)."""

    account: str
    instance_id: str
    gpu_index: int
    source: str
    hour: datetime
    first_at: datetime
    last_at: datetime
    samples: int
    busy: int
    idle: int
    unknown: int
    sm_max: float | None
    mem_max: float | None


_INSTANCE_HOURS = (
    select(*ROLLUPS.c)
    .where(
        ROLLUPS.c.account == bindparam("account"),
        ROLLUPS.c.instance_id == bindparam("instance_id"),
        ROLLUPS.c.hour >= bindparam("since"),
    )
    .order_by(ROLLUPS.c.hour, ROLLUPS.c.gpu_index, ROLLUPS.c.source, ROLLUPS.c.id)
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def gpu_hours(
    conn: Connection, account: str, instance_id: str, since: datetime | None
) -> list[GpuHour]:
    """See ``Store.gpu_hours``."""
    merged: dict[tuple[datetime, int, str], GpuHour] = {}
    params = {"account": account, "instance_id": instance_id, "since": since or _EPOCH}
    for row in conn.execute(_INSTANCE_HOURS, params):
        key = (row.hour, row.gpu_index, row.source)
        hour = GpuHour(
            account=row.account,
            instance_id=row.instance_id,
            gpu_index=row.gpu_index,
            source=row.source,
            hour=row.hour,
            first_at=row.first_at,
            last_at=row.last_at,
            samples=row.samples,
            busy=row.busy,
            idle=row.idle,
            unknown=row.unknown,
            sm_max=row.sm_max,
            mem_max=row.mem_max,
        )
        earlier = merged.get(key)
        merged[key] = hour if earlier is None else _merge(earlier, hour)
    return list(merged.values())


def _merge(a: GpuHour, b: GpuHour) -> GpuHour:
    return GpuHour(
        account=a.account,
        instance_id=a.instance_id,
        gpu_index=a.gpu_index,
        source=a.source,
        hour=a.hour,
        first_at=min(a.first_at, b.first_at),
        last_at=max(a.last_at, b.last_at),
        samples=a.samples + b.samples,
        busy=a.busy + b.busy,
        idle=a.idle + b.idle,
        unknown=a.unknown + b.unknown,
        sm_max=_max(a.sm_max, b.sm_max),
        mem_max=_max(a.mem_max, b.mem_max),
    )


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
