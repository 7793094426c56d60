"""The store's reads on a SQLite file through the standard library's ``sqlite3``, read-only.

``status`` and ``events`` open a SQLite database with this instead of the SQLAlchemy ``Store``:
importing SQLAlchemy (and its ORM, the schema) alone cost more than ``status``'s whole budget of
0.5 s CPU (bench/README.md, "Command-line start-up"). It implements
:class:`~watchdog_gpu.store.reader.StoreReader` and returns the very same values as ``Store`` for
the same database — same SQL conditions and order as ``fleet_loader``, the same converters
(``store.convert``), the same row grouping (``store.history_rows``); a test reads demo,
simulated and randomized databases both ways and compares. One exception, by design:
``load_status_view`` loads only the samples ``status`` reads (the same GPU activity, fewer
samples; the Store loads the whole window there).

Only a database at the shipped head is read this way (:func:`open_sqlite_reader`): its
``alembic_version`` is compared with the head read from the migration scripts
(``store.revisions``). A database behind head (or empty) is the SQLAlchemy path's to migrate; one
written by a newer watchdog-gpu raises SchemaTooNewError, as there.

How values come back as SQLAlchemy returns them: the connection parses declared column types
(``detect_types=PARSE_DECLTYPES``) with converters registered for the schema's ``DATETIME``
(naive UTC text → aware UTC), ``BOOLEAN`` and ``JSON``; ``FLOAT`` columns have REAL affinity, so
SQLite returns floats already. Instants are bound as SQLAlchemy writes them (naive UTC,
``YYYY-MM-DD HH:MM:SS.ffffff``), so text comparisons in SQL agree.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from watchdog_gpu.errors import SchemaTooNewError, StoreError
from watchdog_gpu.fleet import AccountView, FleetView, FuseState, InstanceView, VolumeLedger
from watchdog_gpu.model import OPEN_ACTION_STATUSES, ActionStatus, InstanceState, Verdict
from watchdog_gpu.store import convert
from watchdog_gpu.store.history_rows import (
    PROBE_COLUMNS,
    PROBE_ORDER,
    SAMPLE_COLUMNS,
    SAMPLE_ORDER,
    by_instance,
    probes_from,
    sample_histories,
)
from watchdog_gpu.store.named_rows import record_type
from watchdog_gpu.store.revisions import shipped_history
from watchdog_gpu.store.rows import (
    AccountRecord,
    ActionRow,
    AuditEvent,
    FindingRecord,
    InstanceRecord,
    Leader,
)
from watchdog_gpu.store.values import (
    ACTIONS_DEFERRED,
    DEFAULT_NOTIFICATION_LOOKBACK,
    FUSE_RESET,
    FUSE_TRIPPED,
    RECENT_ACTIONS,
    bind_time,
)

BUSY_TIMEOUT_SECONDS = 10.0  # as the engine's busy_timeout (store/engine.py)
LEADERSHIP_ROW = 1  # store/leadership.py


def _read_time(value: bytes) -> datetime:
    # Naive UTC text as stored; parsed with its offset in one call (a third of the time of
    # parsing, then replacing tzinfo: tens of thousands of samples per read).
    return datetime.fromisoformat(value.decode() + "+00:00")


def _read_bool(value: bytes) -> bool:
    return bool(int(value))


def _read_json(value: bytes) -> Any:
    return json.loads(value)


# Process-wide, but only connections opened with PARSE_DECLTYPES use them (this module's).
sqlite3.register_converter("DATETIME", _read_time)
sqlite3.register_converter("BOOLEAN", _read_bool)
sqlite3.register_converter("JSON", _read_json)


def _marks(values: Sequence[object]) -> str:
    """``?, ?, ?`` for an ``IN (...)`` of ``values``."""
    return ", ".join("?" * len(values))


# -- the SQL (fleet_loader's statements, written out; same conditions, same order) ------------
# Built from this module's constants and ``?`` marks only (S608): every value is a parameter.

_IN_VIEW = "i.account IN ({names}) AND (i.state != ? OR i.last_seen >= ?)"
_INSTANCES = f"SELECT i.* FROM instances AS i WHERE {_IN_VIEW} ORDER BY i.id"  # noqa: S608
_SPANS = (
    "SELECT s.* FROM instance_spans AS s JOIN instances AS i ON i.id = s.instance_pk "  # noqa: S608
    f"WHERE {_IN_VIEW} AND s.first_seen <= ? "
    "AND (s.last_seen >= ? OR s.first_seen >= i.state_since) "
    "ORDER BY s.instance_pk, s.first_seen, s.id"
)
_WINDOW_SAMPLES = (
    f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM gpu_samples "  # noqa: S608
    "WHERE account IN ({names}) AND at >= ? AND at <= ? "
    f"ORDER BY {', '.join(SAMPLE_ORDER)}"
)
# ``status`` (commands/gpu_activity.py and the idle clock it shows, rules/idle_clock.py) reads of
# each instance's window only: each GPU's newest sample, the newest busy sample and every sample
# after it (the idle clock counts the idle rows after the last activity), and the window's first
# sample (the clock's horizon). So it loads each instance's samples from a cutoff (the earliest
# of those instants but the first; the whole window when no sample is busy), and that first
# sample: for a busy instance the last minute or so instead of the whole window
# (bench/README.md, "Command-line start-up"); an idle instance costs its window.
# The verdict is SampleHistory.verdict written in SQL: busy when the highest present of
# sm/enc/dec/jpg/ofa (-1 when none is: ``sample_history.peak``) is above the threshold — that is,
# when one present value is (``NULL > t`` is NULL, false in a CASE), or none is and -1 is; else,
# with no sm, busy when recorded busy and unknown otherwise; else unknown when recorded neither
# busy nor idle (an unreadable recorded verdict is unknown), idle otherwise. So a sample is
# non-idle when above, or without sm, or recorded neither busy nor idle. (Written out per
# aggregate: a CASE yielding a code in a subquery was evaluated once per use, and slower.)
_ABOVE = (
    "(sm > :threshold OR enc > :threshold OR dec > :threshold OR jpg > :threshold "
    "OR ofa > :threshold OR (:threshold < -1.0 AND coalesce(sm, enc, dec, jpg, ofa) IS NULL))"
)
# Per GPU: its first and newest sample and its newest busy one. Grouped by
# instance id first: the sort behind GROUP BY compares fewer bytes than from the account (a few
# names shared by many instances).
_PER_GPU = (
    "SELECT account, instance_id, gpu_index, min(at) AS first, max(at) AS newest, "  # noqa: S608
    f"max(CASE WHEN {_ABOVE} OR (sm IS NULL AND verdict = :busy) THEN at END) AS busy "
    "FROM gpu_samples AS g WHERE account IN ({names}) AND at >= {start} AND {end} "
    "{only} GROUP BY instance_id, gpu_index, account"
)
# That grouped pass was most of status's time (sorting the window's rows; no index leads with
# the instance, and one would cost the daemon's every insert: bench/README.md, "Measured and
# not taken"). So it runs twice: over the recent slice
# (:recent to :now, STATUS_RECENT), then over the older part of the window without the rows of
# GPUs whose instance has a busy sample in the recent slice. Those rows change nothing: that
# busy sample is the instance's newest busy and newer than every older non-idle one, and each
# such GPU's newest sample is in the recent slice too; a GPU of the instance seen only in the
# older part keeps its rows (its newest sample is there). So a busy instance costs its recent
# rows, an idle one its window, and the per-GPU values are the window's.
_STATUS_CUTOFFS = (
    "WITH recent AS ("  # noqa: S608
    + _PER_GPU.format(names="{names}", start=":recent", end="at <= :now", only="")
    + "), settled AS (SELECT instance_id, gpu_index, account FROM recent "
    "WHERE (instance_id, account) IN (SELECT instance_id, account FROM recent "
    "WHERE busy IS NOT NULL)), older AS ("
    + _PER_GPU.format(
        names="{names}",
        start=":since",
        end="at < :recent",
        # NOT EXISTS, not NOT IN: a row value NOT IN a subquery's columns (nullable to SQLite)
        # rescans them on every miss.
        only="AND NOT EXISTS (SELECT 1 FROM settled AS t WHERE t.instance_id = g.instance_id "
        "AND t.gpu_index = g.gpu_index AND t.account = g.account)",
    )
    + "), per_gpu AS (SELECT account, instance_id, gpu_index, min(first) AS first, "
    "max(newest) AS newest, max(busy) AS busy "
    "FROM (SELECT * FROM recent UNION ALL SELECT * FROM older) "
    "GROUP BY instance_id, gpu_index, account), "
    "cutoffs AS (SELECT account, instance_id, "
    # Without a busy sample the idle clock reads the whole window (every idle row counts).
    "CASE WHEN max(busy) IS NULL THEN min(first) "
    "ELSE min(min(newest), max(busy)) END AS cutoff, "
    "min(first) AS first_at "
    "FROM per_gpu GROUP BY instance_id, account) "
)
# The recent slice: long enough to hold a busy GPU's latest samples at any sensible probe
# interval (one a minute by default), short enough to be a small part of the 73-minute window.
STATUS_RECENT = timedelta(minutes=10)
_STATUS_COLUMNS = ", ".join(f"s.{name}" for name in SAMPLE_COLUMNS)
_STATUS_SAMPLES = (
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
_WINDOW_PROBES = (
    f"SELECT {', '.join(PROBE_COLUMNS)} FROM probe_outcomes "  # noqa: S608
    "WHERE account IN ({names}) AND at >= ? AND at <= ? "
    f"ORDER BY {', '.join(PROBE_ORDER)}"
)
_ACCOUNTS = "SELECT * FROM accounts ORDER BY name"
_LATEST_SNAPSHOTS = (
    "SELECT * FROM account_snapshots WHERE id IN "
    "(SELECT max(id) FROM account_snapshots GROUP BY account)"
)
_VOLUMES = (
    "SELECT * FROM volumes WHERE account IN ({names}) AND gone_at IS NULL ORDER BY account, id"
)
_VOLUME_IN_LEDGER = "v.account IN ({names}) AND (v.gone_at IS NULL OR v.gone_at >= ?)"
_LEDGER_VOLUMES = f"SELECT v.* FROM volumes AS v WHERE {_VOLUME_IN_LEDGER} ORDER BY v.account, v.id"  # noqa: S608
_LEDGER_VOLUME_SPANS = (
    "SELECT s.* FROM volume_spans AS s JOIN volumes AS v ON v.id = s.volume_pk "  # noqa: S608
    f"WHERE {_VOLUME_IN_LEDGER} AND s.first_seen <= ? "
    "AND (s.last_seen >= ? OR v.gone_at IS NULL) "
    "ORDER BY s.volume_pk, s.first_seen, s.id"
)
_SSH_KEYS = "SELECT * FROM ssh_keys WHERE account IN ({names}) ORDER BY account, id"
_PROTECTIONS = "SELECT * FROM protections ORDER BY id"
_SNOOZES = "SELECT * FROM snoozes WHERE until > ? ORDER BY id"
# No ORDER BY (see fleet_loader): sorted in Python.
_OPEN_VALUES = tuple(status.value for status in OPEN_ACTION_STATUSES)
_OPEN = _marks(_OPEN_VALUES)
_RECENT_ACTIONS = f"SELECT * FROM actions WHERE created_at >= ? OR status IN ({_OPEN})"  # noqa: S608
_NOTIFICATION_KEYS = "SELECT idempotency_key, created_at FROM notifications WHERE created_at >= ?"
_LATEST_FUSE_EVENT = (
    "SELECT kind FROM audit_events WHERE kind IN (?, ?) ORDER BY at DESC, id DESC LIMIT 1"
)
_LAST_DEFERRED = "SELECT max(at) FROM audit_events WHERE kind = ?"
_ALL_INSTANCES = "SELECT * FROM instances ORDER BY account, instance_id"
_PRESENT_INSTANCES = "SELECT * FROM instances WHERE state != ? ORDER BY account, instance_id"
_LATEST_SEEN = "SELECT max(last_seen) FROM instances WHERE state != ?"
_FINDINGS = "SELECT * FROM findings {where} ORDER BY first_seen, id"
_ACTIONS = "SELECT * FROM actions {where} ORDER BY created_at, id"
_LEADER = "SELECT * FROM leadership WHERE id = ?"
_AUDIT_EVENTS = "SELECT * FROM audit_events {where} ORDER BY at DESC, id DESC {limit}"
_REVISION = "SELECT version_num FROM alembic_version"


def open_sqlite_reader(path: Path, shown: str) -> SqliteReader | None:
    """A reader of the SQLite file at ``path`` (named ``shown`` in messages) when its schema is
    the shipped head; None when it is not to be read this way (no schema yet, behind head, or
    scripts this module cannot read): the caller opens it with the Store, which migrates it.
    Raises SchemaTooNewError when a newer watchdog-gpu wrote it, StoreError when it cannot be
    opened."""
    history = shipped_history()
    if history is None:
        return None
    reader = SqliteReader(path)
    try:
        with reader.errors():
            try:
                versions = [row[0] for row in reader.connection.execute(_REVISION)]
            except sqlite3.OperationalError:  # no alembic_version: never migrated
                versions = []
        if versions == [history.head]:
            return reader
        if len(versions) == 1 and versions[0] not in history.revisions:
            raise SchemaTooNewError(versions[0], shown)
    except BaseException:
        reader.close()
        raise
    reader.close()
    return None


class SqliteReader:
    """:class:`~watchdog_gpu.store.reader.StoreReader` over one read-only ``sqlite3``
    connection (use :func:`open_sqlite_reader`; close it, or use it as a context manager)."""

    def __init__(self, path: Path) -> None:
        uri = f"{path.absolute().as_uri()}?mode=ro"
        try:
            self.connection = sqlite3.connect(
                uri,
                uri=True,
                timeout=BUSY_TIMEOUT_SECONDS,
                detect_types=sqlite3.PARSE_DECLTYPES,
                isolation_level=None,  # transactions only where this module begins them
            )
        except sqlite3.Error as error:
            raise StoreError(f"database error: {error}") from error

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> SqliteReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def errors(self) -> Iterator[None]:
        """sqlite3 failures as StoreError (the driver's reason), as ``Store`` reports them."""
        try:
            yield
        except sqlite3.Error as error:
            raise StoreError(f"database error: {error}") from error

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement inside sees the same committed state."""
        with self.errors():
            self.connection.execute("BEGIN")
            try:
                yield self.connection
            finally:
                self.connection.execute("COMMIT")

    def _rows(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """The rows of ``sql``, each readable by column name."""
        cursor = self.connection.execute(sql, parameters)
        make = record_type(tuple(column[0] for column in cursor.description))
        return [make(row) for row in cursor]

    # -- StoreReader ------------------------------------------------------------------------

    def latest_accounts(self) -> list[AccountRecord]:
        with self._snapshot():
            snapshots = self._latest_snapshots()
            return [
                AccountRecord(
                    view=convert.account_view(row, row.name, row.provider, snapshots.get(row.name)),
                    last_poll_error_message=row.last_poll_error_message,
                )
                for row in self._rows(_ACCOUNTS)
            ]

    def latest_instances(self, *, include_gone: bool = False) -> list[InstanceRecord]:
        with self.errors():
            if include_gone:
                rows = self._rows(_ALL_INSTANCES)
            else:
                rows = self._rows(_PRESENT_INSTANCES, (InstanceState.GONE.value,))
            return [convert.instance_record(row) for row in rows]

    def latest_seen(self) -> datetime | None:
        with self.errors():
            # max() has no declared type: its text is parsed here, as the column's would be.
            (seen,) = self.connection.execute(_LATEST_SEEN, (InstanceState.GONE.value,)).fetchone()
        return None if seen is None else _read_time(seen.encode())

    def load_fleet_view(
        self,
        now: datetime,
        lookback: timedelta,
        spend_since: datetime,
        accounts: Mapping[str, str] | None = None,
        *,
        notification_lookback: timedelta = DEFAULT_NOTIFICATION_LOOKBACK,
    ) -> FleetView:
        return self._fleet_view(
            now, lookback, spend_since, accounts, notification_lookback=notification_lookback
        )

    def load_status_view(
        self, now: datetime, lookback: timedelta, spend_since: datetime, threshold_percent: float
    ) -> FleetView:
        """:meth:`load_fleet_view` with only the samples ``status`` reads with
        ``threshold_percent`` (see ``_STATUS_SAMPLES``): the same ``gpu_activity`` of each
        instance, not the same samples."""
        return self._fleet_view(
            now, lookback, spend_since, None, status_threshold=threshold_percent
        )

    def _fleet_view(
        self,
        now: datetime,
        lookback: timedelta,
        spend_since: datetime,
        accounts: Mapping[str, str] | None,
        *,
        notification_lookback: timedelta = DEFAULT_NOTIFICATION_LOOKBACK,
        status_threshold: float | None = None,
    ) -> FleetView:
        with self._snapshot():
            account_views = self._account_views(accounts)
            names = list(account_views)
            notices = {
                row.idempotency_key: row.created_at
                for row in self._rows(_NOTIFICATION_KEYS, (bind_time(now - notification_lookback),))
            }
            window_start = min(spend_since, now - lookback)
            instances = self._instance_views(
                names, now, window_start, now - lookback, status_threshold
            )
            in_names = {"names": _marks(names)}
            actions = self._rows(_RECENT_ACTIONS, (bind_time(now - RECENT_ACTIONS), *_OPEN_VALUES))
            return FleetView(
                now=now,
                instances=instances,
                accounts=account_views,
                volumes=tuple(
                    convert.volume_view(row)
                    for row in self._rows(_VOLUMES.format_map(in_names), names)
                ),
                volume_ledgers=self._volume_ledgers(names, now, window_start),
                ssh_keys=tuple(
                    convert.ssh_key(row)
                    for row in self._rows(_SSH_KEYS.format_map(in_names), names)
                ),
                protections=tuple(convert.protection(row) for row in self._rows(_PROTECTIONS)),
                snoozes=tuple(
                    convert.snooze(row) for row in self._rows(_SNOOZES, (bind_time(now),))
                ),
                recent_actions=tuple(
                    convert.action_row(row).to_record()
                    for row in sorted(actions, key=lambda row: (row.created_at, row.id))
                ),
                notification_keys=frozenset(notices),
                notice_times=notices,
                fuse=self._fuse_state(),
            )

    def _volume_ledgers(
        self, names: list[str], now: datetime, window_start: datetime
    ) -> tuple[VolumeLedger, ...]:
        in_names = {"names": _marks(names)}
        in_ledger = (*names, bind_time(window_start))
        volumes = self._rows(_LEDGER_VOLUMES.format_map(in_names), in_ledger)
        spans = self._rows(
            _LEDGER_VOLUME_SPANS.format_map(in_names),
            (*in_ledger, bind_time(now), bind_time(window_start)),
        )
        return convert.volume_ledgers(volumes, spans)

    def list_findings(self, seen_since: datetime | None = None) -> list[FindingRecord]:
        with self.errors():
            if seen_since is None:
                rows = self._rows(_FINDINGS.format(where=""))
            else:
                rows = self._rows(
                    _FINDINGS.format(where="WHERE last_seen >= ?"), (bind_time(seen_since),)
                )
            return [convert.finding_record(row) for row in rows]

    def list_actions(
        self, statuses: Sequence[str] | None = None, since: datetime | None = None
    ) -> list[ActionRow]:
        conditions: list[str] = []
        parameters: list[Any] = []
        if statuses is not None:
            wanted = [ActionStatus(status).value for status in statuses]
            conditions.append(f"status IN ({_marks(wanted)})")
            parameters += wanted
        if since is not None:
            conditions.append("created_at >= ?")
            parameters.append(bind_time(since))
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        with self.errors():
            rows = self._rows(_ACTIONS.format(where=where), parameters)
            return [convert.action_row(row) for row in rows]

    def list_audit_events(
        self,
        since: datetime | None = None,
        limit: int | None = None,
        *,
        account: str | None = None,
        instance_id: str | None = None,
    ) -> list[AuditEvent]:
        conditions: list[str] = []
        parameters: list[Any] = []
        for condition, value in (
            ("at >= ?", None if since is None else bind_time(since)),
            ("account = ?", account),
            ("instance_id = ?", instance_id),
        ):
            if value is not None:
                conditions.append(condition)
                parameters.append(value)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        if limit is not None:
            parameters.append(limit)
        sql = _AUDIT_EVENTS.format(where=where, limit="LIMIT ?" if limit is not None else "")
        with self.errors():
            events = [convert.audit_event(row) for row in self._rows(sql, parameters)]
        events.reverse()
        return events

    def fuse_latched(self) -> bool:
        with self._snapshot():
            return self._fuse_state().latched

    def leader(self) -> Leader | None:
        with self.errors():
            rows = self._rows(_LEADER, (LEADERSHIP_ROW,))
            return convert.leader(rows[0]) if rows else None

    # -- parts --------------------------------------------------------------------------------

    def _latest_snapshots(self) -> dict[str, Any]:
        return {row.account: row for row in self._rows(_LATEST_SNAPSHOTS)}

    def _account_views(self, accounts: Mapping[str, str] | None) -> dict[str, AccountView]:
        rows = {row.name: row for row in self._rows(_ACCOUNTS)}
        if accounts is not None:
            rows = {name: row for name, row in rows.items() if name in accounts}
        wanted = (
            dict(accounts) if accounts is not None else {n: r.provider for n, r in rows.items()}
        )
        snapshots = self._latest_snapshots()
        return {
            name: convert.account_view(rows.get(name), name, provider, snapshots.get(name))
            for name, provider in sorted(wanted.items())
        }

    def _instance_views(
        self,
        names: list[str],
        now: datetime,
        window_start: datetime,
        samples_since: datetime,
        status_threshold: float | None,
    ) -> dict[str, InstanceView]:
        in_view = (*names, InstanceState.GONE.value, bind_time(window_start))
        marks = {"names": _marks(names)}
        rows = self._rows(_INSTANCES.format_map(marks), in_view)
        span_parameters = (*in_view, bind_time(now), bind_time(window_start))
        spans = self._rows(_SPANS.format_map(marks), span_parameters)
        window = (*names, bind_time(samples_since), bind_time(now))
        connection = self.connection
        if status_threshold is None:
            sample_rows = connection.execute(_WINDOW_SAMPLES.format_map(marks), window)
        else:
            named = {f"name{number}": name for number, name in enumerate(names)}
            judging = {
                "threshold": status_threshold,
                "busy": Verdict.BUSY.value,
                "idle": Verdict.IDLE.value,
                "since": bind_time(samples_since),
                "recent": bind_time(max(samples_since, now - STATUS_RECENT)),
                "now": bind_time(now),
                **named,
            }
            sql = _STATUS_SAMPLES.format(names=", ".join(f":{key}" for key in named))
            sample_rows = connection.execute(sql, judging)
        samples = sample_histories(sample_rows)
        probes = by_instance(
            probes_from(connection.execute(_WINDOW_PROBES.format_map(marks), window))
        )
        return convert.instance_views(rows, spans, samples, probes)

    def _fuse_state(self) -> FuseState:
        latest = self.connection.execute(_LATEST_FUSE_EVENT, (FUSE_TRIPPED, FUSE_RESET)).fetchone()
        (deferred,) = self.connection.execute(_LAST_DEFERRED, (ACTIONS_DEFERRED,)).fetchone()
        return FuseState(
            latched=latest is not None and latest[0] == FUSE_TRIPPED,
            last_deferred_at=None if deferred is None else _read_time(deferred.encode()),
        )
