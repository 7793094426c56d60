"""Parsed dmon rows → ``GpuSample`` values, and the one call the SSH prober makes.

Timestamps: dmon's text output carries no time unless run with ``-o T``/``-o DT``, and the remote
clock's zone and accuracy are unknown, so every instant is anchored at ``read_at`` (when the
prober read the output): see :func:`row_times`. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from watchdog_gpu.errors import DmonError
from watchdog_gpu.model import GpuSample, SampleSource
from watchdog_gpu.probe.compute_apps import COMPUTE_APPS_FIELDS, ComputeApp, parse_compute_apps
from watchdog_gpu.probe.dmon import DmonRow, DmonTable, parse_dmon
from watchdog_gpu.probe.verdicts import processes_per_gpu, row_verdict


def cycle_numbers(rows: Sequence[DmonRow]) -> tuple[int, ...]:
    """The sampling cycle (0, 1, …) of each row: a cycle ends when a GPU index repeats."""
    numbers: list[int] = []
    cycle, seen = 0, set[int]()
    for row in rows:
        if row.gpu in seen:
            cycle, seen = cycle + 1, set()
        seen.add(row.gpu)
        numbers.append(cycle)
    return tuple(numbers)


def row_times(
    table: DmonTable,
    *,
    read_at: datetime,
    interval: timedelta,
    started_at: datetime | None = None,
) -> tuple[datetime, ...]:
    """The instant of each row, the last one at ``read_at`` (when the output was read).

    With a ``time`` column (``-o T`` / ``-o DT``) the remote clock's *differences* are used, not
    its absolute value (its time zone is unknown and it may be skewed): a row printed 7 s before
    the last is placed 7 s before ``read_at``, so a stall shows as a gap. Without one (or when the
    printed times do not parse or run backwards) the sampling cycles are spaced ``interval`` apart,
    the last cycle at ``read_at``; all rows of a cycle share its instant. No instant is placed
    before ``started_at`` (when the command started), so a clock jump cannot invent coverage.
    """
    if interval <= timedelta(0):
        raise ValueError("interval must be positive")
    if read_at.tzinfo is None:
        raise ValueError("read_at must be timezone-aware")
    printed = _printed_times(table.rows)
    if printed is not None:
        times = [read_at - (printed[-1] - at) for at in printed]
    else:
        cycles = cycle_numbers(table.rows)
        last = cycles[-1] if cycles else 0
        times = [read_at - (last - cycle) * interval for cycle in cycles]
    if started_at is not None:
        if started_at.tzinfo is None:
            raise ValueError("started_at must be timezone-aware")
        times = [max(at, started_at) for at in times]
    return tuple(times)


def _printed_times(rows: Sequence[DmonRow]) -> list[datetime] | None:
    """The printed date/time of each row on a naive-as-UTC scale, or None if unusable."""
    times: list[datetime] = []
    day = datetime(2000, 1, 1, tzinfo=UTC)
    for row in rows:
        clock, date = row.values.get("time"), row.values.get("date")
        if not isinstance(clock, str):
            return None
        printed_date = date if isinstance(date, str) else None
        parsed = _parse_printed(printed_date, clock, day)
        if parsed is None:
            return None
        if times and parsed < times[-1]:
            if printed_date is None:  # -o T alone: the clock may have passed midnight
                parsed += timedelta(days=1)
                day += timedelta(days=1)
            if parsed < times[-1]:
                return None  # the remote clock went backwards: do not trust it
        times.append(parsed)
    return times or None


def _parse_printed(date: str | None, clock: str, day: datetime) -> datetime | None:
    if not clock.isascii():
        return None  # int() would read full-width or Arabic-Indic digits
    try:
        hours, minutes, seconds = (int(part) for part in clock.split(":"))
        if date is not None:
            if len(date) != 8 or not (date.isascii() and date.isdigit()):
                return None
            day = datetime(int(date[:4]), int(date[4:6]), int(date[6:]), tzinfo=UTC)
        return day.replace(hour=hours, minute=minutes, second=seconds)
    except ValueError:
        return None


def gpu_samples(
    table: DmonTable,
    *,
    account: str,
    instance_id: str,
    read_at: datetime,
    interval: timedelta,
    threshold: float = 0.0,
    processes: Mapping[int, int] | None = None,
    started_at: datetime | None = None,
) -> tuple[GpuSample, ...]:
    """Turn parsed rows into ``GpuSample`` values (one per row), stamped by :func:`row_times`.

    ``processes`` is :func:`processes_per_gpu`'s result (``None``: no compute-apps list).
    """
    times = row_times(table, read_at=read_at, interval=interval, started_at=started_at)
    samples = []
    for row, at in zip(table.rows, times, strict=True):
        count = None if processes is None else processes.get(row.gpu)
        samples.append(
            GpuSample(
                account=account,
                instance_id=instance_id,
                at=at,
                gpu_index=row.gpu,
                verdict=row_verdict(row, threshold=threshold, processes=count),
                source=SampleSource.DMON,
                sm=row.metric("sm"),
                mem=row.metric("mem"),
                enc=row.metric("enc"),
                dec=row.metric("dec"),
                jpg=row.metric("jpg"),
                ofa=row.metric("ofa"),
            )
        )
    return tuple(samples)


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """What one probe's outputs yield: the samples, the parsed table, the compute processes
    (``None`` when the list was not read or not readable) and notes for the log."""

    samples: tuple[GpuSample, ...]
    table: DmonTable
    apps: tuple[ComputeApp, ...] | None
    notes: tuple[str, ...]


def read_probe_output(
    dmon_text: str,
    compute_apps_text: str | None,
    *,
    account: str,
    instance_id: str,
    read_at: datetime,
    interval: timedelta,
    threshold: float = 0.0,
    started_at: datetime | None = None,
    gpu_ids: Mapping[str, int] | None = None,
) -> ProbeReading:
    """Parse the prober's two outputs into samples.

    ``dmon_text`` is the stdout of ``nvidia-smi dmon -s u -d <interval> -c <N> [-o DT]``;
    ``compute_apps_text`` that of ``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,
    used_memory --format=csv,noheader,nounits`` (fields: ``COMPUTE_APPS_FIELDS``), or ``None``.
    Raise ``DmonError`` when the dmon output is an error text or unreadable; an unreadable
    compute-apps output only costs the process evidence (noted), never the samples.
    """
    table = parse_dmon(dmon_text)
    notes = list(table.notes)
    apps: tuple[ComputeApp, ...] | None = None
    if compute_apps_text is not None:
        try:
            apps = parse_compute_apps(compute_apps_text, COMPUTE_APPS_FIELDS)
        except DmonError as error:
            notes.append(f"compute-apps not used ({error.kind}): {error}")
    processes = processes_per_gpu(apps, table.gpu_indices, gpu_ids)
    samples = gpu_samples(
        table,
        account=account,
        instance_id=instance_id,
        read_at=read_at,
        interval=interval,
        threshold=threshold,
        processes=processes,
        started_at=started_at,
    )
    return ProbeReading(samples=samples, table=table, apps=apps, notes=tuple(notes))
