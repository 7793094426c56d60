"""The SQLAlchemy selects of the history tables' columns the fleet view reads
(``history_rows.SAMPLE_COLUMNS`` / ``PROBE_COLUMNS``, in their order)."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Select, Table, select

from watchdog_gpu.store.history_rows import PROBE_COLUMNS, PROBE_ORDER, SAMPLE_COLUMNS, SAMPLE_ORDER
from watchdog_gpu.store.schema import GpuSampleRow, ProbeOutcomeRow


def _select(table: Table, columns: tuple[str, ...], order: tuple[str, ...]) -> Select[Any]:
    return select(*(table.c[name] for name in columns)).order_by(*(table.c[name] for name in order))


SAMPLES_QUERY = _select(cast(Table, GpuSampleRow.__table__), SAMPLE_COLUMNS, SAMPLE_ORDER)
PROBES_QUERY = _select(cast(Table, ProbeOutcomeRow.__table__), PROBE_COLUMNS, PROBE_ORDER)
