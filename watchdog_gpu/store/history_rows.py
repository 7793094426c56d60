"""The rows the fleet view reads from the two append-only history tables — GPU samples and probe
outcomes — and the domain values built from them (used by ``history`` and ``fleet_loader``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import select

from watchdog_gpu.model import GpuSample, ProbeOutcome, ProbeStatus, SampleSource, Verdict
from watchdog_gpu.store.schema import GpuSampleRow, ProbeOutcomeRow

T = TypeVar("T")
V = TypeVar("V")
InstanceKey = tuple[str, str]  # (account, instance_id)
# One row read: its instance, its ``at``, its place in the table's order, the value built from it.
Entry = tuple[InstanceKey, datetime, tuple[Any, ...], T]

_VERDICTS = {verdict.value: verdict for verdict in Verdict}
_SOURCES = {source.value: source for source in SampleSource}
_STATUSES = {status.value: status for status in ProbeStatus}

# Columns, not ORM entities: a tick may read thousands of samples, and building ORM objects for
# each was most of a tick's time (see bench/).
SAMPLES_QUERY = select(
    GpuSampleRow.id,
    GpuSampleRow.account,
    GpuSampleRow.instance_id,
    GpuSampleRow.at,
    GpuSampleRow.gpu_index,
    GpuSampleRow.verdict,
    GpuSampleRow.source,
    GpuSampleRow.sm,
    GpuSampleRow.mem,
    GpuSampleRow.enc,
    GpuSampleRow.dec,
    GpuSampleRow.jpg,
    GpuSampleRow.ofa,
    GpuSampleRow.covers_from,
).order_by(GpuSampleRow.at, GpuSampleRow.gpu_index, GpuSampleRow.id)
PROBES_QUERY = select(
    ProbeOutcomeRow.id,
    ProbeOutcomeRow.account,
    ProbeOutcomeRow.instance_id,
    ProbeOutcomeRow.at,
    ProbeOutcomeRow.status,
    ProbeOutcomeRow.duration_seconds,
    ProbeOutcomeRow.detail,
    ProbeOutcomeRow.interactive_login,
    ProbeOutcomeRow.first_at,
    ProbeOutcomeRow.repeats,
    ProbeOutcomeRow.mode,
).order_by(ProbeOutcomeRow.at, ProbeOutcomeRow.id)


def samples_from(rows: Iterable[Any]) -> list[Entry[GpuSample]]:
    """Entries of the rows of SAMPLES_QUERY, in the fleet view's order (at, GPU, id).

    The values are shared where equal (:func:`shared`): the Store keeps the lookback's samples in
    memory, and a string, instant and float per row and field was most of their size."""
    verdicts, sources = _VERDICTS, _SOURCES
    same = shared()
    return [
        (
            (account, instance_id),
            at,
            (at, gpu, row_id),
            GpuSample(
                account=account,
                instance_id=instance_id,
                at=at,
                gpu_index=gpu,
                # An unreadable recorded verdict is unknown, never idle.
                verdict=verdicts.get(verdict, Verdict.UNKNOWN),
                source=sources.get(source, SampleSource.DMON),
                sm=same(sm),
                mem=same(mem),
                enc=same(enc),
                dec=same(dec),
                jpg=same(jpg),
                ofa=same(ofa),
                covers_from=same(covers_from),
            ),
        )
        for (
            row_id,
            account,
            instance_id,
            at,
            gpu,
            verdict,
            source,
            sm,
            mem,
            enc,
            dec,
            jpg,
            ofa,
            covers_from,
        ) in _shared_keys(rows, same)
    ]


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
