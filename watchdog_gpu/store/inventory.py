"""Recording an account's volumes and SSH keys from a complete listing (part of
``record_observation``; same approach: one read per table, executemany writes)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, delete, insert, select, update

from watchdog_gpu.model import AccountObservation, VolumeSnapshot
from watchdog_gpu.store.schema import SshKey, Volume, VolumeSpan
from watchdog_gpu.store.spans import (
    CurrentSpan,
    SpanWrites,
    chunks,
    current_span,
    same_rate,
    with_current_span,
)

VOLUMES = cast(Table, Volume.__table__)
VOLUME_SPANS = cast(Table, VolumeSpan.__table__)
SSH_KEYS = cast(Table, SshKey.__table__)
Values = dict[str, Any]

# Built once (see observations).
_OF_ACCOUNT = VOLUMES.c.account == bindparam("account")
_VOLUMES = (
    with_current_span(
        VOLUMES,
        (
            VOLUMES.c.id,
            VOLUMES.c.volume_id,
            VOLUMES.c.attached,
            VOLUMES.c.detached_since,
            VOLUMES.c.gone_at,
        ),
        VOLUME_SPANS,
        "volume_pk",
    )
    .where(_OF_ACCOUNT)
    .order_by(VOLUMES.c.volume_id)
)
_VOLUME_IDS = select(VOLUMES.c.volume_id, VOLUMES.c.id).where(
    _OF_ACCOUNT, VOLUMES.c.volume_id.in_(bindparam("ids", expanding=True))
)
_UPDATE_VOLUMES = update(VOLUMES).where(VOLUMES.c.id == bindparam("pk"))
_INSERT_VOLUME_SPANS = insert(VOLUME_SPANS)
_INSERT_VOLUMES = insert(VOLUMES)
_INSERT_SSH_KEYS = insert(SSH_KEYS)
_EXTEND_SPANS = update(VOLUME_SPANS).where(VOLUME_SPANS.c.id == bindparam("pk"))
_SSH_KEYS = select(SSH_KEYS.c.key_id, SSH_KEYS.c.id).where(
    SSH_KEYS.c.account == bindparam("account")
)
_UPDATE_SSH_KEYS = update(SSH_KEYS).where(SSH_KEYS.c.id == bindparam("pk"))
_DELETE_SSH_KEYS = delete(SSH_KEYS).where(SSH_KEYS.c.id.in_(bindparam("ids", expanding=True)))


def record_volumes(
    conn: Connection, account: str, snapshots: Iterable[VolumeSnapshot], now: datetime
) -> None:
    """Upsert the listed volumes, extend or open their spans, mark absent ones gone."""
    listed = {snapshot.volume_id: snapshot for snapshot in snapshots}
    params = {"account": account}
    existing = {row.volume_id: row for row in conn.execute(_VOLUMES, params)}
    if not listed and not existing:
        return
    changes = _VolumeChanges()
    for volume_id, snapshot in listed.items():
        row = existing.get(volume_id)
        if row is None:
            changes.new.append(snapshot)
        else:
            changes.observe(row, snapshot, now)
    changes.gone = [
        {"pk": row.id, "gone_at": now, "detached_since": None}
        for volume_id, row in existing.items()
        if volume_id not in listed and row.gone_at is None
    ]
    _write_volumes(conn, account, changes, now)


@dataclass
class _VolumeChanges:
    """The writes a poll's volume listing calls for, gathered to be executed in bulk."""

    spans: SpanWrites = field(default_factory=SpanWrites)
    updates: list[Values] = field(default_factory=list)  # listed volumes recorded before
    gone: list[Values] = field(default_factory=list)  # volumes absent from the listing
    new: list[VolumeSnapshot] = field(default_factory=list)  # first seen: to insert

    def observe(self, row: Any, snapshot: VolumeSnapshot, now: datetime) -> None:
        """A listed volume recorded before: extend its current span or open a new one."""
        span = current_span(row)
        if span is not None and _continues_span(row, span, snapshot):
            self.spans.extend(span.id, span.last_seen, now)
        else:
            self.spans.opened.append(_span(row.id, snapshot, now))
        self.updates.append({**_volume_values(row, snapshot, now), "pk": row.id})


def _write_volumes(conn: Connection, account: str, changes: _VolumeChanges, now: datetime) -> None:
    """Execute a poll's volume writes in bulk."""
    for rows in (changes.updates, changes.gone):
        if rows:
            conn.execute(_UPDATE_VOLUMES, rows)
    if changes.spans.extended:
        conn.execute(_EXTEND_SPANS, changes.spans.extended)
    if changes.new:
        changes.spans.opened.extend(_insert_volumes(conn, account, changes.new, now))
    if changes.spans.opened:
        conn.execute(_INSERT_VOLUME_SPANS, changes.spans.opened)


def _continues_span(row: Any, span: CurrentSpan, snapshot: VolumeSnapshot) -> bool:
    """Whether the listing continues the volume's current span: present, same attachment,
    same rate."""
    return (
        row.gone_at is None
        and span.attached is snapshot.attached
        and same_rate(span.usd_per_hour, snapshot.usd_per_hour)
    )


def _insert_volumes(
    conn: Connection, account: str, snapshots: list[VolumeSnapshot], now: datetime
) -> list[Values]:
    """Insert first-seen volumes; returns their first spans."""
    rows = []
    for snapshot in snapshots:
        values = _volume_values(None, snapshot, now)
        values.update(account=account, volume_id=snapshot.volume_id, first_seen=now)
        rows.append(values)
    conn.execute(_INSERT_VOLUMES, rows)
    ids: dict[str, int] = {}
    for part in chunks([snapshot.volume_id for snapshot in snapshots]):
        ids.update(conn.execute(_VOLUME_IDS, {"account": account, "ids": list(part)}).all())
    return [_span(ids[snapshot.volume_id], snapshot, now) for snapshot in snapshots]


def _span(pk: int, snapshot: VolumeSnapshot, now: datetime) -> Values:
    return {
        "volume_pk": pk,
        "attached": snapshot.attached,
        "usd_per_hour": snapshot.usd_per_hour,
        "first_seen": now,
        "last_seen": now,
    }


def _volume_values(row: Any, snapshot: VolumeSnapshot, now: datetime) -> Values:
    """The volume row's new values; ``row`` is its current row (None for a new volume)."""
    was_detached = (
        row is not None
        and row.gone_at is None
        and row.attached is False
        and row.detached_since is not None
    )
    if snapshot.attached is False:
        detached_since = row.detached_since if was_detached else now
    else:
        # Attached, or the API does not say: either way not known to be detached.
        detached_since = None
    return {
        "detached_since": detached_since,
        "provider": snapshot.provider,
        "name": snapshot.name,
        "observed_at": snapshot.observed_at,
        "size_gb": snapshot.size_gb,
        "usd_per_hour": snapshot.usd_per_hour,
        "attached": snapshot.attached,
        "created_at": snapshot.created_at,
        "last_seen": now,
        "gone_at": None,
    }


def record_ssh_keys(conn: Connection, observation: AccountObservation, now: datetime) -> None:
    """The account's keys become exactly the listed ones."""
    account = observation.account.account
    listed = {key.key_id: key for key in observation.ssh_keys}
    existing: dict[str, int] = dict(conn.execute(_SSH_KEYS, {"account": account}).all())
    new: list[Values] = []
    updates: list[Values] = []
    for key_id, key in listed.items():
        values = {
            "provider": key.provider,
            "name": key.name,
            "public_key": key.public_key,
            "last_seen": now,
        }
        pk = existing.get(key_id)
        if pk is None:
            new.append({"account": account, "key_id": key_id, "first_seen": now, **values})
        else:
            updates.append({"pk": pk, **values})
    if updates:
        conn.execute(_UPDATE_SSH_KEYS, updates)
    if new:
        conn.execute(_INSERT_SSH_KEYS, new)
    gone = [pk for key_id, pk in existing.items() if key_id not in listed]
    if gone:
        conn.execute(_DELETE_SSH_KEYS, {"ids": gone})
