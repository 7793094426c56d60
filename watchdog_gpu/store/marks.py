"""Job marks: when an engine process last finished a phase (``schema.JobMarkRow``), written in
that phase's transaction and read fresh by the jobs of other threads."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Connection, Table, delete, func, insert, select, update

from watchdog_gpu.store.schema import JobMarkRow

MARKS = cast(Table, JobMarkRow.__table__)


def write_mark(conn: Connection, process: str, name: str, at: datetime) -> None:
    """Set ``process``'s mark ``name`` to ``at``. Its first such mark drops the other processes'
    (one engine runs per database: theirs are of a process gone, and would pile up)."""
    mine = (MARKS.c.process == process) & (MARKS.c.name == name)
    if conn.execute(update(MARKS).where(mine).values(at=at)).rowcount:
        return
    conn.execute(delete(MARKS).where((MARKS.c.name == name) & (MARKS.c.process != process)))
    conn.execute(insert(MARKS).values(process=process, name=name, at=at))


def read_marks(conn: Connection, process: str) -> dict[str, datetime]:
    rows = conn.execute(select(MARKS.c.name, MARKS.c.at).where(MARKS.c.process == process))
    return {row.name: row.at for row in rows}


def latest_mark_at(conn: Connection, name: str) -> datetime | None:
    """The newest mark ``name`` of any process (a restarted daemon's first evaluation finds its
    predecessor's last one)."""
    latest: datetime | None = conn.scalar(select(func.max(MARKS.c.at)).where(MARKS.c.name == name))
    return latest
