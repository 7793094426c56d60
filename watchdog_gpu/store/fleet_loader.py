"""Building the read-only FleetView the rules and the planner decide from.

Plain column selects, not ORM entities: the converters in ``convert`` read rows by attribute
name, which a Core row has as well, and a tick loads every instance, span and account snapshot of
the fleet (building ORM objects for each cost more than the rules). Samples and probe outcomes come
from the Store's :class:`~watchdog_gpu.store.history.FleetHistory` when it has one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Row, and_, func, or_, select
from sqlalchemy.orm import Session

from watchdog_gpu.fleet import AccountView, FleetView, InstanceView, VolumeView
from watchdog_gpu.model import ActionStatus, GpuSample, InstanceState, ProbeOutcome, StateSpan
from watchdog_gpu.store import convert
from watchdog_gpu.store.history import (
    Entry,
    FleetHistory,
    InstanceKey,
    fetch_probes,
    fetch_samples,
)
from watchdog_gpu.store.schema import (
    Account,
    AccountSnapshotRow,
    ActionOutboxRow,
    GpuSampleRow,
    Instance,
    InstanceSpan,
    NotificationOutboxRow,
    ProbeOutcomeRow,
    ProtectionRow,
    SnoozeRow,
    SshKey,
    Volume,
)

T = TypeVar("T")

RECENT_ACTIONS = timedelta(hours=24)
# Actions in these statuses are still in flight: the planner sees them whatever their age.
OPEN_ACTION_STATUSES = (
    ActionStatus.PENDING.value,
    ActionStatus.CLAIMED.value,
    ActionStatus.CALLED.value,
    ActionStatus.UNVERIFIED.value,
    ActionStatus.HELD.value,
    ActionStatus.BLOCKED.value,
)


def load_fleet_view(
    session: Session,
    *,
    now: datetime,
    lookback: timedelta,
    spend_since: datetime,
    accounts: Mapping[str, str] | None,
    notification_lookback: timedelta,
    history: FleetHistory | None = None,
) -> FleetView:
    """See ``Store.load_fleet_view``; ``history`` caches samples and probes between loads."""
    account_views = _account_views(session, accounts)
    names = list(account_views)
    window_start = min(spend_since, now - lookback)
    instances = _instance_views(session, names, now, window_start, now - lookback, history=history)
    ssh_keys = select(*SshKey.__table__.columns).where(SshKey.account.in_(names))
    snoozes = select(*SnoozeRow.__table__.columns).where(SnoozeRow.until > now)
    actions = select(*ActionOutboxRow.__table__.columns).where(
        or_(
            ActionOutboxRow.created_at >= now - RECENT_ACTIONS,
            ActionOutboxRow.status.in_(OPEN_ACTION_STATUSES),
        )
    )
    return FleetView(
        now=now,
        instances=instances,
        accounts=account_views,
        volumes=_volume_views(session, names),
        ssh_keys=tuple(
            convert.ssh_key(row)
            for row in session.execute(ssh_keys.order_by(SshKey.account, SshKey.id))
        ),
        protections=tuple(
            convert.protection(row)
            for row in session.execute(
                select(*ProtectionRow.__table__.columns).order_by(ProtectionRow.id)
            )
        ),
        snoozes=tuple(
            convert.snooze(row) for row in session.execute(snoozes.order_by(SnoozeRow.id))
        ),
        recent_actions=tuple(
            convert.action_row(row).to_record()
            for row in session.execute(
                actions.order_by(ActionOutboxRow.created_at, ActionOutboxRow.id)
            )
        ),
        notification_keys=frozenset(
            session.scalars(
                select(NotificationOutboxRow.idempotency_key).where(
                    NotificationOutboxRow.created_at >= now - notification_lookback
                )
            )
        ),
    )


def latest_account_snapshots(
    session: Session, names: list[str] | None = None
) -> dict[str, Row[Any]]:
    """The newest snapshot row of each account (of ``names`` when given)."""
    latest_ids = select(func.max(AccountSnapshotRow.id)).group_by(AccountSnapshotRow.account)
    if names is not None:
        latest_ids = latest_ids.where(AccountSnapshotRow.account.in_(names))
    rows = session.execute(
        select(*AccountSnapshotRow.__table__.columns).where(AccountSnapshotRow.id.in_(latest_ids))
    )
    return {row.account: row for row in rows}


def account_view(
    account: Account | Row[Any] | None,
    name: str,
    provider: str,
    snapshot: AccountSnapshotRow | Row[Any] | None,
) -> AccountView:
    return AccountView(
        account=name,
        provider=provider,
        latest=convert.account_snapshot(snapshot) if snapshot is not None else None,
        last_poll_ok_at=account.last_poll_ok_at if account else None,
        last_poll_error_kind=account.last_poll_error_kind if account else None,
        last_poll_error_at=account.last_poll_error_at if account else None,
    )


def _account_views(session: Session, accounts: Mapping[str, str] | None) -> dict[str, AccountView]:
    query = select(*Account.__table__.columns)
    if accounts is not None:
        query = query.where(Account.name.in_(list(accounts)))
    rows = {row.name: row for row in session.execute(query)}
    wanted = dict(accounts) if accounts is not None else {n: r.provider for n, r in rows.items()}
    snapshots = latest_account_snapshots(session, list(wanted))
    return {
        name: account_view(rows.get(name), name, provider, snapshots.get(name))
        for name, provider in sorted(wanted.items())
    }


def _instance_views(
    session: Session,
    names: list[str],
    now: datetime,
    window_start: datetime,
    samples_since: datetime,
    *,
    history: FleetHistory | None,
) -> dict[str, InstanceView]:
    # A gone instance stays in the view while it has history inside the window (its spend
    # still counts); every other instance is in the view whatever its age.
    in_view: ColumnElement[bool] = and_(
        Instance.account.in_(names),
        or_(Instance.state != InstanceState.GONE.value, Instance.last_seen >= window_start),
    )
    rows = list(
        session.execute(select(*Instance.__table__.columns).where(in_view).order_by(Instance.id))
    )
    spans: dict[int, list[StateSpan]] = defaultdict(list)
    span_query = (
        select(*InstanceSpan.__table__.columns)
        .join(Instance, Instance.id == InstanceSpan.instance_pk)
        .where(
            in_view,
            InstanceSpan.first_seen <= now,
            # Inside the window, or part of the current state's run (which may have started
            # before the window: state_since must not be cut short by the spend period).
            or_(
                InstanceSpan.last_seen >= window_start,
                InstanceSpan.first_seen >= Instance.state_since,
            ),
        )
        .order_by(InstanceSpan.instance_pk, InstanceSpan.first_seen, InstanceSpan.id)
    )
    for span in session.execute(span_query):
        spans[span.instance_pk].append(convert.state_span(span))
    samples, probes = _history(session, names, samples_since, now, history)
    views: dict[str, InstanceView] = {}
    for row in rows:
        key = (row.account, row.instance_id)
        views[f"{row.account}/{row.instance_id}"] = InstanceView(
            latest=convert.instance_snapshot(row),
            first_seen=row.first_seen,
            spans=tuple(spans.get(row.id, ())),
            samples=samples.get(key, ()),
            probes=probes.get(key, ()),
        )
    return views


def _history(
    session: Session,
    names: list[str],
    since: datetime,
    now: datetime,
    history: FleetHistory | None,
) -> tuple[dict[InstanceKey, tuple[GpuSample, ...]], dict[InstanceKey, tuple[ProbeOutcome, ...]]]:
    """Samples and probe outcomes with ``since <= at <= now``, by instance, oldest first."""
    if history is not None:
        return history.samples.load(session, since, now), history.probes.load(session, since, now)
    samples = fetch_samples(
        session,
        and_(GpuSampleRow.account.in_(names), GpuSampleRow.at >= since, GpuSampleRow.at <= now),
    )
    probes = fetch_probes(
        session,
        and_(
            ProbeOutcomeRow.account.in_(names),
            ProbeOutcomeRow.at >= since,
            ProbeOutcomeRow.at <= now,
        ),
    )
    return _by_instance(samples), _by_instance(probes)


def _by_instance(entries: list[Entry[T]]) -> dict[InstanceKey, tuple[T, ...]]:
    grouped: dict[InstanceKey, list[T]] = defaultdict(list)
    for key, _at, _order, item in entries:
        grouped[key].append(item)
    return {key: tuple(items) for key, items in grouped.items()}


def _volume_views(session: Session, names: list[str]) -> tuple[VolumeView, ...]:
    query = (
        select(*Volume.__table__.columns)
        .where(Volume.account.in_(names), Volume.gone_at.is_(None))
        .order_by(Volume.account, Volume.id)
    )
    return tuple(
        VolumeView(
            latest=convert.volume_snapshot(row),
            first_seen=row.first_seen,
            detached_since=row.detached_since,
        )
        for row in session.execute(query)
    )
