"""Recording an account's volumes and SSH keys from a complete listing (part of
``record_observation``; same approach: one read per table, executemany writes)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from watchdog_gpu.model import AccountObservation, VolumeSnapshot
from watchdog_gpu.store.schema import SshKey, Volume, VolumeSpan
from watchdog_gpu.store.spans import chunks, current_spans, same_rate

VOLUMES = cast(Table, Volume.__table__)
VOLUME_SPANS = cast(Table, VolumeSpan.__table__)
SSH_KEYS = cast(Table, SshKey.__table__)
Values = dict[str, Any]


def record_volumes(
    session: Session, account: str, snapshots: Iterable[VolumeSnapshot], now: datetime
) -> None:
    """Upsert the listed volumes, extend or open their spans, mark absent ones gone."""
    listed = {snapshot.volume_id: snapshot for snapshot in snapshots}
    of_account = VOLUMES.c.account == account
    existing = {
        row.volume_id: row
        for row in session.execute(
            select(
                VOLUMES.c.id,
                VOLUMES.c.volume_id,
                VOLUMES.c.attached,
                VOLUMES.c.detached_since,
                VOLUMES.c.gone_at,
            )
            .where(of_account)
            .order_by(VOLUMES.c.volume_id)
        )
    }
    if not listed and not existing:
        return
    spans = current_spans(
        session, VOLUME_SPANS, "volume_pk", select(VOLUMES.c.id).where(of_account)
    )
    new_spans: list[Values] = []
    extended: list[Values] = []
    updates: list[Values] = []
    new: list[VolumeSnapshot] = []
    for volume_id, snapshot in listed.items():
        row = existing.get(volume_id)
        if row is None:
            new.append(snapshot)
            continue
        span = spans.get(row.id)
        if (
            span is not None
            and span.attached is snapshot.attached
            and same_rate(span.usd_per_hour, snapshot.usd_per_hour)
            and row.gone_at is None
        ):
            if span.last_seen < now:
                extended.append({"pk": span.id, "last_seen": now})
        else:
            new_spans.append(_span(row.id, snapshot, now))
        values = _volume_values(row, snapshot, now)
        values["pk"] = row.id
        updates.append(values)
    gone = [
        {"pk": row.id, "gone_at": now, "detached_since": None}
        for volume_id, row in existing.items()
        if volume_id not in listed and row.gone_at is None
    ]
    by_pk = VOLUMES.c.id == bindparam("pk")
    for rows in (updates, gone):
        if rows:
            session.execute(update(VOLUMES).where(by_pk), rows)
    if extended:
        session.execute(update(VOLUME_SPANS).where(VOLUME_SPANS.c.id == bindparam("pk")), extended)
    if new:
        new_spans.extend(_insert_volumes(session, account, new, now))
    if new_spans:
        session.execute(insert(VOLUME_SPANS), new_spans)


def _insert_volumes(
    session: Session, account: str, snapshots: list[VolumeSnapshot], now: datetime
) -> list[Values]:
    """Insert first-seen volumes; returns their first spans."""
    rows = []
    for snapshot in snapshots:
        values = _volume_values(None, snapshot, now)
        values.update(account=account, volume_id=snapshot.volume_id, first_seen=now)
        rows.append(values)
    session.execute(insert(VOLUMES), rows)
    ids: dict[str, int] = {}
    for part in chunks([snapshot.volume_id for snapshot in snapshots]):
        query = select(VOLUMES.c.volume_id, VOLUMES.c.id).where(
            VOLUMES.c.account == account, VOLUMES.c.volume_id.in_(part)
        )
        ids.update(session.execute(query).all())
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


def record_ssh_keys(session: Session, observation: AccountObservation, now: datetime) -> None:
    """The account's keys become exactly the listed ones."""
    account = observation.account.account
    listed = {key.key_id: key for key in observation.ssh_keys}
    query = select(SSH_KEYS.c.key_id, SSH_KEYS.c.id).where(SSH_KEYS.c.account == account)
    existing: dict[str, int] = dict(session.execute(query).all())
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
        session.execute(update(SSH_KEYS).where(SSH_KEYS.c.id == bindparam("pk")), updates)
    if new:
        session.execute(insert(SSH_KEYS), new)
    gone = [pk for key_id, pk in existing.items() if key_id not in listed]
    if gone:
        session.execute(delete(SSH_KEYS).where(SSH_KEYS.c.id.in_(gone)))
