"""Building the read-only FleetView the rules and the planner decide from."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from watchdog_gpu.fleet import AccountView, FleetView, InstanceView, VolumeView
from watchdog_gpu.model import (
    ActionStatus,
    GpuSample,
    InstanceState,
    ProbeOutcome,
    SampleSource,
    StateSpan,
    Verdict,
)
from watchdog_gpu.store import convert
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
) -> FleetView:
    """See ``Store.load_fleet_view``."""
    account_views = _account_views(session, accounts)
    names = list(account_views)
    window_start = min(spend_since, now - lookback)
    instances = _instance_views(session, names, now, window_start, now - lookback)
    return FleetView(
        now=now,
        instances=instances,
        accounts=account_views,
        volumes=_volume_views(session, names),
        ssh_keys=tuple(
            convert.ssh_key(row)
            for row in session.scalars(
                select(SshKey).where(SshKey.account.in_(names)).order_by(SshKey.account, SshKey.id)
            )
        ),
        protections=tuple(
            convert.protection(row)
            for row in session.scalars(select(ProtectionRow).order_by(ProtectionRow.id))
        ),
        snoozes=tuple(
            convert.snooze(row)
            for row in session.scalars(
                select(SnoozeRow).where(SnoozeRow.until > now).order_by(SnoozeRow.id)
            )
        ),
        recent_actions=tuple(
            convert.action_row(row).to_record()
            for row in session.scalars(
                select(ActionOutboxRow)
                .where(
                    or_(
                        ActionOutboxRow.created_at >= now - RECENT_ACTIONS,
                        ActionOutboxRow.status.in_(OPEN_ACTION_STATUSES),
                    )
                )
                .order_by(ActionOutboxRow.created_at, ActionOutboxRow.id)
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
) -> dict[str, AccountSnapshotRow]:
    """The newest snapshot row of each account (of ``names`` when given)."""
    latest_ids = select(func.max(AccountSnapshotRow.id)).group_by(AccountSnapshotRow.account)
    if names is not None:
        latest_ids = latest_ids.where(AccountSnapshotRow.account.in_(names))
    rows = session.scalars(select(AccountSnapshotRow).where(AccountSnapshotRow.id.in_(latest_ids)))
    return {row.account: row for row in rows}


def account_view(
    account: Account | None, name: str, provider: str, snapshot: AccountSnapshotRow | None
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
    query = select(Account)
    if accounts is not None:
        query = query.where(Account.name.in_(list(accounts)))
    rows = {row.name: row for row in session.scalars(query)}
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
) -> dict[str, InstanceView]:
    # A gone instance stays in the view while it has history inside the window (its spend
    # still counts); every other instance is in the view whatever its age.
    in_view: ColumnElement[bool] = and_(
        Instance.account.in_(names),
        or_(Instance.state != InstanceState.GONE.value, Instance.last_seen >= window_start),
    )
    rows = list(session.scalars(select(Instance).where(in_view).order_by(Instance.id)))
    spans: dict[int, list[StateSpan]] = defaultdict(list)
    span_query = (
        select(InstanceSpan)
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
    for span in session.scalars(span_query):
        spans[span.instance_pk].append(convert.state_span(span))
    samples = _samples(session, names, samples_since, now)
    probes = _probes(session, names, samples_since, now)
    views: dict[str, InstanceView] = {}
    for row in rows:
        key = f"{row.account}/{row.instance_id}"
        views[key] = InstanceView(
            latest=convert.instance_snapshot(row),
            first_seen=row.first_seen,
            spans=tuple(spans.get(row.id, ())),
            samples=tuple(samples.get(key, ())),
            probes=tuple(probes.get(key, ())),
        )
    return views


def _samples(
    session: Session, names: list[str], since: datetime, now: datetime
) -> dict[str, list[GpuSample]]:
    # Columns, not ORM entities: a tick reads thousands of samples per instance, and building
    # ORM objects for each was most of a tick's time (see bench/).
    table = GpuSampleRow
    query = (
        select(
            table.account,
            table.instance_id,
            table.at,
            table.gpu_index,
            table.verdict,
            table.source,
            table.sm,
            table.mem,
            table.enc,
            table.dec,
            table.jpg,
            table.ofa,
        )
        .where(table.account.in_(names), table.at >= since, table.at <= now)
        .order_by(table.at, table.gpu_index, table.id)
    )
    verdicts = {verdict.value: verdict for verdict in Verdict}
    sources = {source.value: source for source in SampleSource}
    by_instance: dict[str, list[GpuSample]] = defaultdict(list)
    for (
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
    ) in session.execute(query):
        by_instance[f"{account}/{instance_id}"].append(
            GpuSample(
                account=account,
                instance_id=instance_id,
                at=at,
                gpu_index=gpu,
                # An unreadable recorded verdict is unknown, never idle.
                verdict=verdicts.get(verdict, Verdict.UNKNOWN),
                source=sources.get(source, SampleSource.DMON),
                sm=sm,
                mem=mem,
                enc=enc,
                dec=dec,
                jpg=jpg,
                ofa=ofa,
            )
        )
    return by_instance


def _probes(
    session: Session, names: list[str], since: datetime, now: datetime
) -> dict[str, list[ProbeOutcome]]:
    query = (
        select(ProbeOutcomeRow)
        .where(
            ProbeOutcomeRow.account.in_(names),
            ProbeOutcomeRow.at >= since,
            ProbeOutcomeRow.at <= now,
        )
        .order_by(ProbeOutcomeRow.at, ProbeOutcomeRow.id)
    )
    by_instance: dict[str, list[ProbeOutcome]] = defaultdict(list)
    for row in session.scalars(query):
        by_instance[f"{row.account}/{row.instance_id}"].append(convert.probe_outcome(row))
    return by_instance


def _volume_views(session: Session, names: list[str]) -> tuple[VolumeView, ...]:
    query = (
        select(Volume)
        .where(Volume.account.in_(names), Volume.gone_at.is_(None))
        .order_by(Volume.account, Volume.id)
    )
    return tuple(
        VolumeView(
            latest=convert.volume_snapshot(row),
            first_seen=row.first_seen,
            detached_since=row.detached_since,
        )
        for row in session.scalars(query)
    )
