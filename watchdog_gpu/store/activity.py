"""Activity marks (``schema.ActivityMarkRow``): each instance's GPU activity, one row per change.

The tick reads every present instance's current mark and appends the changed ones
(``watchdog_gpu/activity_marks.py`` decides which); the spend report reads the marks that
describe its window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import cast

from sqlalchemy import BindParameter, Connection, Table, bindparam, func, insert, or_, select

from watchdog_gpu.model import Activity, ActivityMark, InstanceState
from watchdog_gpu.store.schema import ActivityMarkRow, Instance

MARKS = cast(Table, ActivityMarkRow.__table__)
INSTANCES = cast(Table, Instance.__table__)
_PRESENT = INSTANCES.c.state != InstanceState.GONE.value
_NEWEST_IDS = select(func.max(MARKS.c.id)).group_by(MARKS.c.instance_pk)
# Every present instance with its newest mark (NULLs without one): one read per evaluation.
_CURRENT = (
    select(
        INSTANCES.c.id,
        INSTANCES.c.account,
        INSTANCES.c.instance_id,
        MARKS.c.activity,
        MARKS.c.since,
    )
    .select_from(
        INSTANCES.outerjoin(
            MARKS, (MARKS.c.instance_pk == INSTANCES.c.id) & MARKS.c.id.in_(_NEWEST_IDS)
        )
    )
    .where(_PRESENT)
)
_INSERT = insert(MARKS).values(
    instance_pk=bindparam("pk"),
    activity=bindparam("activity"),
    since=bindparam("since"),
    recorded_at=bindparam("recorded_at"),
)
_WINDOW_START: BindParameter[datetime] = bindparam("window_start")
# The marks that describe [window_start, now]: those from its start on, and each instance's
# newest one from before it (the class at its start; older ones are overridden by it).
_WINDOW = (
    select(INSTANCES.c.account, INSTANCES.c.instance_id, MARKS.c.activity, MARKS.c.since)
    .join(INSTANCES, INSTANCES.c.id == MARKS.c.instance_pk)
    .where(
        INSTANCES.c.account.in_(bindparam("names", expanding=True)),
        MARKS.c.since <= bindparam("now"),
        or_(
            MARKS.c.since >= _WINDOW_START,
            MARKS.c.id.in_(
                select(func.max(MARKS.c.id))
                .where(MARKS.c.since < _WINDOW_START)
                .group_by(MARKS.c.instance_pk)
            ),
        ),
    )
    .order_by(MARKS.c.instance_pk, MARKS.c.id)
)


def _activity(value: str) -> Activity:
    # A value this version does not know is blind, never idle.
    return Activity(value) if value in Activity.__members__.values() else Activity.BLIND


def current_marks(conn: Connection) -> dict[str, ActivityMark | None]:
    """Every present instance ("account/instance_id") with its newest mark (None: none yet)."""
    return {
        f"{row.account}/{row.instance_id}": (
            None if row.activity is None else ActivityMark(_activity(row.activity), row.since)
        )
        for row in conn.execute(_CURRENT)
    }


def record_marks(
    conn: Connection, marks: Sequence[tuple[str, ActivityMark]], recorded_at: datetime
) -> int:
    """Append ``marks`` (instance key, mark; in order) of present instances; returns how many
    were written (a key no present instance has is skipped)."""
    if not marks:
        return 0
    ids = {
        f"{row.account}/{row.instance_id}": row.id
        for row in conn.execute(
            select(INSTANCES.c.id, INSTANCES.c.account, INSTANCES.c.instance_id).where(_PRESENT)
        )
    }
    rows = [
        {
            "pk": ids[key],
            "activity": mark.activity.value,
            "since": mark.since,
            "recorded_at": recorded_at,
        }
        for key, mark in marks
        if key in ids
    ]
    if rows:
        conn.execute(_INSERT, rows)
    return len(rows)


def window_marks(
    conn: Connection, names: list[str], window_start: datetime, now: datetime
) -> dict[str, tuple[ActivityMark, ...]]:
    """The marks of the instances of accounts ``names`` that describe ``[window_start, now]``,
    in the order recorded, by "account/instance_id"."""
    found: dict[str, list[ActivityMark]] = defaultdict(list)
    params = {"names": names, "window_start": window_start, "now": now}
    for row in conn.execute(_WINDOW, params):
        mark = ActivityMark(_activity(row.activity), row.since)
        found[f"{row.account}/{row.instance_id}"].append(mark)
    return {key: tuple(marks) for key, marks in found.items()}
