"""Building the read-only FleetView the rules and the planner decide from.

Plain column selects, not ORM entities: the converters in ``convert`` read rows by attribute
name, which a Core row has as well, and a tick loads every instance, span and account snapshot of
the fleet (building ORM objects for each cost more than the rules). Samples and probe outcomes come
from the Store's :class:`~watchdog_gpu.store.history.FleetHistory` when it has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Float,
    Row,
    Table,
    and_,
    bindparam,
    func,
    or_,
    select,
    text,
)
from sqlalchemy.orm import Session

from watchdog_gpu.fleet import (
    AcceptedCall,
    AccountView,
    FleetView,
    FuseState,
    InstanceView,
    VolumeLedger,
)
from watchdog_gpu.model import (
    OPEN_ACTION_STATUSES,
    ActionKind,
    ActionStatus,
    InstanceState,
    Verdict,
)
from watchdog_gpu.store import convert
from watchdog_gpu.store.activity import window_marks
from watchdog_gpu.store.history import FleetHistory, NewestIds
from watchdog_gpu.store.history_queries import PROBES_QUERY, SAMPLES_QUERY
from watchdog_gpu.store.history_rows import (
    SAMPLE_COLUMNS,
    SAMPLE_ORDER,
    by_instance,
    probes_from,
    sample_histories,
)
from watchdog_gpu.store.named_rows import named
from watchdog_gpu.store.rows import FindingRecord, InstanceRecord
from watchdog_gpu.store.schema import (
    Account,
    AccountSnapshotRow,
    ActionOutboxRow,
    AuditEventRow,
    FindingRow,
    GpuSampleRow,
    Instance,
    InstanceSpan,
    NotificationOutboxRow,
    ProbeOutcomeRow,
    ProtectionRow,
    SnoozeRow,
    SshKey,
    Volume,
    VolumeSpan,
)
from watchdog_gpu.store.values import (
    ACTIONS_DEFERRED,
    FUSE_RESET,
    FUSE_TRIPPED,
    RECENT_ACTIONS,
)

T = TypeVar("T")

# The statements are built once: building one and computing its cache key cost more than
# running it (SQLAlchemy caches the compiled SQL by that key).
_NAMES: BindParameter[list[str]] = bindparam("names", expanding=True)
_NOW: BindParameter[datetime] = bindparam("now")
_ACCOUNTS = select(*Account.__table__.columns)
_NAMED_ACCOUNTS = _ACCOUNTS.where(Account.name.in_(_NAMES))
_LATEST_SNAPSHOT_IDS = select(func.max(AccountSnapshotRow.id)).group_by(AccountSnapshotRow.account)
_LATEST_SNAPSHOTS = select(*AccountSnapshotRow.__table__.columns).where(
    AccountSnapshotRow.id.in_(_LATEST_SNAPSHOT_IDS)
)
_NAMED_LATEST_SNAPSHOTS = select(*AccountSnapshotRow.__table__.columns).where(
    AccountSnapshotRow.id.in_(_LATEST_SNAPSHOT_IDS.where(AccountSnapshotRow.account.in_(_NAMES)))
)
# A gone instance stays in the view while it has history inside the window (its spend still
# counts); every other instance is in the view whatever its age.
_IN_VIEW: ColumnElement[bool] = and_(
    Instance.account.in_(_NAMES),
    or_(
        Instance.state != InstanceState.GONE.value,
        Instance.last_seen >= bindparam("window_start"),
    ),
)
_INSTANCES = select(*Instance.__table__.columns).where(_IN_VIEW).order_by(Instance.id)
_SPANS = (
    select(*InstanceSpan.__table__.columns)
    .join(Instance, Instance.id == InstanceSpan.instance_pk)
    .where(
        _IN_VIEW,
        InstanceSpan.first_seen <= _NOW,
        # Inside the window, or part of the current state's run (which may have started before
        # the window: state_since must not be cut short by the spend period).
        or_(
            InstanceSpan.last_seen >= bindparam("window_start"),
            InstanceSpan.first_seen >= Instance.state_since,
        ),
    )
    .order_by(InstanceSpan.instance_pk, InstanceSpan.first_seen, InstanceSpan.id)
)
_WINDOW_SAMPLES = SAMPLES_QUERY.where(
    GpuSampleRow.account.in_(_NAMES),
    GpuSampleRow.at >= bindparam("since"),
    GpuSampleRow.at <= _NOW,
)
_WINDOW_PROBES = PROBES_QUERY.where(
    ProbeOutcomeRow.account.in_(_NAMES),
    ProbeOutcomeRow.at >= bindparam("since"),
    ProbeOutcomeRow.at <= _NOW,
)
# ``status`` (commands/gpu_activity.py and the idle clock it shows, rules/idle_clock.py) reads of
# each instance's window only: each GPU's newest sample, the newest busy sample and every sample
# after it, and the window's first sample (the clock's horizon). So it loads each instance's
# samples from a cutoff (the earliest of those instants but the first; the whole window when no
# sample is busy), and that first sample: at 1,000 busy instances the last minutes instead of the
# whole window. A sample is busy as SampleHistory.verdict judges it: above the threshold in one
# present metric (or none present and the threshold below -1), or without sm and recorded busy.
_ABOVE = (
    "(sm > :threshold OR enc > :threshold OR dec > :threshold OR jpg > :threshold "
    "OR ofa > :threshold OR (:threshold < -1.0 AND coalesce(sm, enc, dec, jpg, ofa) IS NULL))"
)
# Built from this module's constants only (S608): every value is a bound parameter.
_PER_GPU = (
    "SELECT account, instance_id, gpu_index, min(at) AS first, max(at) AS newest, "  # noqa: S608
    f"max(CASE WHEN {_ABOVE} OR (sm IS NULL AND verdict = :busy) THEN at END) AS busy "
    "FROM gpu_samples AS g WHERE account IN :names AND at >= {start} AND {end} "
    "{only} GROUP BY instance_id, gpu_index, account"
)
# The grouped pass runs twice: over the recent slice (:recent to :now), then over the older part
# of the window without the rows of GPUs whose instance has a busy sample in the recent slice
# (that busy sample is newer than every older one, and each such GPU's newest sample is recent
# too). A busy instance costs its recent rows, an idle one its window.
_STATUS_CUTOFFS = (
    "WITH recent AS ("  # noqa: S608
    + _PER_GPU.format(start=":recent", end="at <= :now", only="")
    + "), settled AS (SELECT instance_id, gpu_index, account FROM recent "
    "WHERE (instance_id, account) IN (SELECT instance_id, account FROM recent "
    "WHERE busy IS NOT NULL)), older AS ("
    + _PER_GPU.format(
        start=":since",
        end="at < :recent",
        # NOT EXISTS, not NOT IN: SQLite rescans a row value NOT IN a subquery on every miss.
        only="AND NOT EXISTS (SELECT 1 FROM settled AS t WHERE t.instance_id = g.instance_id "
        "AND t.gpu_index = g.gpu_index AND t.account = g.account)",
    )
    + "), per_gpu AS (SELECT account, instance_id, gpu_index, min(first) AS first, "
    "max(newest) AS newest, max(busy) AS busy "
    "FROM (SELECT * FROM recent UNION ALL SELECT * FROM older) AS slices "
    "GROUP BY instance_id, gpu_index, account), "
    "cutoffs AS (SELECT account, instance_id, "
    # Without a busy sample the idle clock reads the whole window (every idle row counts).
    "CASE WHEN max(busy) IS NULL THEN min(first) "
    "WHEN min(newest) < max(busy) THEN min(newest) ELSE max(busy) END AS cutoff, "
    "min(first) AS first_at "
    "FROM per_gpu GROUP BY instance_id, account) "
)
# The recent slice: long enough to hold a busy GPU's latest samples at any sensible probe
# interval (one a minute by default), short enough to be a small part of the 73-minute window.
STATUS_RECENT = timedelta(minutes=10)
_STATUS_COLUMNS = ", ".join(f"s.{name}" for name in SAMPLE_COLUMNS)
_SAMPLES_TABLE = cast(Table, GpuSampleRow.__table__)
_STATUS_SAMPLES = (
    text(
        f"{_STATUS_CUTOFFS}"  # noqa: S608
        f"SELECT {_STATUS_COLUMNS} FROM gpu_samples AS s "
        "JOIN cutoffs AS c ON c.account = s.account AND c.instance_id = s.instance_id "
        "WHERE s.at >= (SELECT min(cutoff) FROM cutoffs) AND s.at <= :now AND s.at >= c.cutoff "
        # The first sample of a window without a non-idle one (an index lookup of its instant).
        f"UNION ALL SELECT {_STATUS_COLUMNS} FROM gpu_samples AS s "
        "JOIN cutoffs AS c ON c.account = s.account AND c.instance_id = s.instance_id "
        "WHERE s.at IN (SELECT first_at FROM cutoffs) AND s.at = c.first_at AND s.at < c.cutoff "
        f"ORDER BY {', '.join(SAMPLE_ORDER)}"
    )
    .bindparams(
        bindparam("names", expanding=True),
        bindparam("threshold", type_=Float()),
        *(bindparam(name, type_=_SAMPLES_TABLE.c.at.type) for name in ("since", "recent", "now")),
    )
    .columns(*(_SAMPLES_TABLE.c[name] for name in SAMPLE_COLUMNS))
)
_VOLUMES = (
    select(*Volume.__table__.columns)
    .where(Volume.account.in_(_NAMES), Volume.gone_at.is_(None))
    .order_by(Volume.account, Volume.id)
)
# The ledger's volumes: every one that may have billed inside the window, gone ones included,
# with their rate runs (a present volume's are few: they change on attachment or price only).
_VOLUME_IN_LEDGER: ColumnElement[bool] = and_(
    Volume.account.in_(_NAMES),
    or_(Volume.gone_at.is_(None), Volume.gone_at >= bindparam("window_start")),
)
_LEDGER_VOLUMES = (
    select(*Volume.__table__.columns).where(_VOLUME_IN_LEDGER).order_by(Volume.account, Volume.id)
)
_LEDGER_VOLUME_SPANS = (
    select(*VolumeSpan.__table__.columns)
    .join(Volume, Volume.id == VolumeSpan.volume_pk)
    .where(
        _VOLUME_IN_LEDGER,
        VolumeSpan.first_seen <= _NOW,
        or_(VolumeSpan.last_seen >= bindparam("window_start"), Volume.gone_at.is_(None)),
    )
    .order_by(VolumeSpan.volume_pk, VolumeSpan.first_seen, VolumeSpan.id)
)
_SSH_KEYS = (
    select(*SshKey.__table__.columns)
    .where(SshKey.account.in_(_NAMES))
    .order_by(SshKey.account, SshKey.id)
)
_PROTECTIONS = select(*ProtectionRow.__table__.columns).order_by(ProtectionRow.id)
_SNOOZES = select(*SnoozeRow.__table__.columns).where(SnoozeRow.until > _NOW).order_by(SnoozeRow.id)
# No ORDER BY: with it SQLite walks the whole (never pruned) outbox through the created_at
# index; without it each side of the OR uses its own index. Sorted in Python instead.
_ACTIONS = select(*ActionOutboxRow.__table__.columns).where(
    or_(
        ActionOutboxRow.created_at >= bindparam("actions_since"),
        ActionOutboxRow.status.in_([status.value for status in OPEN_ACTION_STATUSES]),
    )
)
# The verified stops and destroys accepted inside the window, for each instance's latest
# (InstanceView.accepted_call). One accepted before the window cannot move a bill inside it.
_ACCEPTED_CALLS = select(
    ActionOutboxRow.account,
    ActionOutboxRow.instance_id,
    ActionOutboxRow.kind,
    ActionOutboxRow.accepted_at,
).where(
    ActionOutboxRow.account.in_(_NAMES),
    ActionOutboxRow.status == ActionStatus.VERIFIED.value,
    ActionOutboxRow.accepted_at >= bindparam("window_start"),
    ActionOutboxRow.accepted_at <= _NOW,
)
_NOTIFICATION_KEYS = select(
    NotificationOutboxRow.idempotency_key, NotificationOutboxRow.created_at
).where(NotificationOutboxRow.created_at >= bindparam("notifications_since"))
_LATEST_FUSE_EVENT = (
    select(AuditEventRow.kind)
    .where(AuditEventRow.kind.in_((FUSE_TRIPPED, FUSE_RESET)))
    .order_by(AuditEventRow.at.desc(), AuditEventRow.id.desc())
    .limit(1)
)
_LAST_DEFERRED = select(func.max(AuditEventRow.at)).where(AuditEventRow.kind == ACTIONS_DEFERRED)
_ALL_INSTANCES = select(*Instance.__table__.columns).order_by(
    Instance.account, Instance.instance_id
)
_PRESENT_INSTANCES = _ALL_INSTANCES.where(Instance.state != InstanceState.GONE.value)
_LATEST_SEEN = select(func.max(Instance.last_seen)).where(
    Instance.state != InstanceState.GONE.value
)
_PRESENT_COUNT = (
    select(func.count()).select_from(Instance).where(Instance.state != InstanceState.GONE.value)
)
_FINDINGS = select(*FindingRow.__table__.columns).order_by(FindingRow.first_seen, FindingRow.id)
_FINDINGS_SEEN_SINCE = _FINDINGS.where(FindingRow.last_seen >= bindparam("seen_since"))


def load_fleet_view(
    conn: Connection,
    *,
    now: datetime,
    lookback: timedelta,
    spend_since: datetime,
    accounts: Mapping[str, str] | None,
    notification_lookback: timedelta,
    history: FleetHistory | None = None,
    status_threshold: float | None = None,
    activity: bool = False,
) -> FleetView:
    """See ``Store.load_fleet_view``; ``history`` keeps samples, probe outcomes and account
    snapshots between loads (None: read everything). ``status_threshold``: load only the samples
    ``status`` reads with that threshold (``_STATUS_SAMPLES``; without ``history``).
    ``activity``: with the activity marks of the window (``store/activity.py``)."""
    newest = history.newest_ids(conn) if history is not None else None
    account_views = _account_views(conn, accounts, history, newest)
    names = list(account_views)
    notices = {
        row.idempotency_key: row.created_at
        for row in conn.execute(
            _NOTIFICATION_KEYS, {"notifications_since": now - notification_lookback}
        )
    }
    window_start = min(spend_since, now - lookback)
    instances = _instance_views(
        conn,
        names,
        now,
        window_start,
        now - lookback,
        history=history,
        newest=newest,
        status_threshold=status_threshold,
    )
    return FleetView(
        now=now,
        instances=instances,
        accounts=account_views,
        volumes=tuple(map(convert.volume_view, named(conn.execute(_VOLUMES, {"names": names})))),
        volume_ledgers=volume_ledgers(conn, names, now, window_start),
        ssh_keys=tuple(map(convert.ssh_key, named(conn.execute(_SSH_KEYS, {"names": names})))),
        protections=tuple(convert.protection(row) for row in conn.execute(_PROTECTIONS)),
        snoozes=tuple(convert.snooze(row) for row in conn.execute(_SNOOZES, {"now": now})),
        recent_actions=tuple(
            convert.action_row(row).to_record()
            for row in sorted(
                conn.execute(_ACTIONS, {"actions_since": now - RECENT_ACTIONS}),
                key=lambda row: (row.created_at, row.id),
            )
        ),
        notification_keys=frozenset(notices),
        notice_times=notices,
        fuse=fuse_state(conn),
        activity=window_marks(conn, names, window_start, now) if activity else {},
    )


def volume_ledgers(
    conn: Connection, names: list[str], now: datetime, window_start: datetime
) -> tuple[VolumeLedger, ...]:
    """What the volumes of ``names`` billed since ``window_start`` (gone ones included)."""
    params = {"names": names, "now": now, "window_start": window_start}
    return convert.volume_ledgers(
        conn.execute(_LEDGER_VOLUMES, params), conn.execute(_LEDGER_VOLUME_SPANS, params)
    )


def fuse_state(conn: Connection) -> FuseState:
    """The fuse as the audit trail records it (both reads use the (kind, at) index)."""
    latest = conn.scalar(_LATEST_FUSE_EVENT)
    return FuseState(latched=latest == FUSE_TRIPPED, last_deferred_at=conn.scalar(_LAST_DEFERRED))


def instance_records(conn: Connection, *, include_gone: bool) -> list[InstanceRecord]:
    """See ``Store.latest_instances``."""
    query = _ALL_INSTANCES if include_gone else _PRESENT_INSTANCES
    return [convert.instance_record(row) for row in named(conn.execute(query))]


def latest_seen(conn: Connection) -> datetime | None:
    """See ``Store.latest_seen``."""
    return conn.scalar(_LATEST_SEEN)


def instance_count(conn: Connection) -> int:
    """See ``Store.instance_count``."""
    return conn.scalar(_PRESENT_COUNT) or 0


def finding_records(conn: Connection, seen_since: datetime | None) -> list[FindingRecord]:
    """See ``Store.list_findings``."""
    if seen_since is None:
        rows = conn.execute(_FINDINGS)
    else:
        rows = conn.execute(_FINDINGS_SEEN_SINCE, {"seen_since": seen_since})
    return [convert.finding_record(row) for row in named(rows)]


def latest_account_snapshots(
    conn: Connection | Session, names: list[str] | None = None
) -> dict[str, Row[Any]]:
    """The newest snapshot row of each account (of ``names`` when given)."""
    if isinstance(conn, Session):
        conn = conn.connection()
    if names is None:
        rows = conn.execute(_LATEST_SNAPSHOTS)
    else:
        rows = conn.execute(_NAMED_LATEST_SNAPSHOTS, {"names": names})
    return {row.account: row for row in rows}


def _account_views(
    conn: Connection,
    accounts: Mapping[str, str] | None,
    history: FleetHistory | None,
    newest: NewestIds | None,
) -> dict[str, AccountView]:
    if accounts is None:
        found = conn.execute(_ACCOUNTS)
    else:
        found = conn.execute(_NAMED_ACCOUNTS, {"names": list(accounts)})
    rows = {row.name: row for row in found}
    wanted = dict(accounts) if accounts is not None else {n: r.provider for n, r in rows.items()}
    snapshots = None
    if history is not None and newest is not None:
        snapshots = history.snapshots.load(conn, newest.snapshots)
    if snapshots is None:
        snapshots = latest_account_snapshots(conn, list(wanted))
    return {
        name: convert.account_view(rows.get(name), name, provider, snapshots.get(name))
        for name, provider in sorted(wanted.items())
    }


def _instance_views(
    conn: Connection,
    names: list[str],
    now: datetime,
    window_start: datetime,
    samples_since: datetime,
    *,
    history: FleetHistory | None,
    newest: NewestIds | None,
    status_threshold: float | None,
) -> dict[str, InstanceView]:
    params = {"names": names, "now": now, "window_start": window_start}
    rows = named(conn.execute(_INSTANCES, params))
    spans = named(conn.execute(_SPANS, params))
    window = {"names": names, "since": samples_since, "now": now}
    if history is not None and newest is not None:
        samples = history.samples.load(conn, samples_since, now, newest.samples)
        probes = history.probes.load(conn, samples_since, now, newest.probes)
    else:
        if status_threshold is None:
            samples = sample_histories(conn.execute(_WINDOW_SAMPLES, window))
        else:
            judging = {
                **window,
                "threshold": status_threshold,
                "busy": Verdict.BUSY.value,
                "recent": max(samples_since, now - STATUS_RECENT),
            }
            samples = sample_histories(conn.execute(_STATUS_SAMPLES, judging))
        probes = by_instance(probes_from(conn.execute(_WINDOW_PROBES, window)))
    return convert.instance_views(rows, spans, samples, probes, accepted_calls(conn, params))


def accepted_calls(
    conn: Connection, params: Mapping[str, object]
) -> dict[tuple[str, str], AcceptedCall]:
    """Each instance's latest verified stop or destroy accepted in the window (``names``,
    ``window_start`` and ``now`` of ``params``), with the instant the provider accepted it."""
    latest: dict[tuple[str, str], AcceptedCall] = {}
    for row in conn.execute(_ACCEPTED_CALLS, params):
        key = (row.account, row.instance_id)
        known = latest.get(key)
        if known is None or row.accepted_at > known.at:
            latest[key] = AcceptedCall(ActionKind(row.kind), row.accepted_at)
    return latest
