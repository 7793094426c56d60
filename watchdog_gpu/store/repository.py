"""The repository every other part uses: ``Store``.

Given an Engine (``create_engine_for``) on a migrated database (``upgrade_to_head``). Each method
is one transaction on its own session, so one Store is shared by every thread of the daemon.
Nothing here reads the clock: every method that needs time takes ``now`` (aware UTC; a naive
datetime raises :class:`~watchdog_gpu.store.types.NaiveDatetimeError`). Database failures raise
:class:`~watchdog_gpu.errors.StoreError` with the driver's reason (never the SQL parameters).
Returned values are frozen dataclasses, never ORM objects.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Connection, Engine, Table, and_, delete, func, select
from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError
from sqlalchemy.orm import Session, sessionmaker

from watchdog_gpu.errors import StoreError
from watchdog_gpu.fleet import FleetView, Protection, ProtectionKind, Snooze
from watchdog_gpu.model import (
    AccountObservation,
    ActionResult,
    ActionStatus,
    ActivityMark,
    Finding,
    GpuSample,
    InstanceSnapshot,
    PlannedAction,
    PlannedNotification,
    ProbeOutcome,
)
from watchdog_gpu.store import activity as activity_store
from watchdog_gpu.store import convert, decisions, fleet_loader, observations, outbox, rollup
from watchdog_gpu.store import findings as findings_store
from watchdog_gpu.store import marks as marks_store
from watchdog_gpu.store.engine import writing
from watchdog_gpu.store.history import FleetHistory
from watchdog_gpu.store.leadership import Fence, check_fence, read_leader
from watchdog_gpu.store.rollup import RAW_SAMPLES_FOR, Deleted, GpuHour, hour_of
from watchdog_gpu.store.rows import (
    AccountRecord,
    ActionRow,
    AuditEvent,
    FindingRecord,
    InstanceRecord,
    Leader,
    NotificationRow,
)
from watchdog_gpu.store.schema import (
    Account,
    AccountSnapshotRow,
    AuditEventRow,
    GpuSampleRollupRow,
    GpuSampleRow,
    Instance,
    PinnedHostKey,
    ProbeOutcomeRow,
    ProtectionRow,
    SnoozeRow,
)
from watchdog_gpu.store.types import JsonValue, NaiveDatetimeError
from watchdog_gpu.store.values import DEFAULT_NOTIFICATION_LOOKBACK, FUSE_RESET, FUSE_TRIPPED
from watchdog_gpu.store.written_instances import WrittenInstances

logger = logging.getLogger(__name__)

PROBES = cast(Table, ProbeOutcomeRow.__table__)

DEFAULT_SAMPLE_RETENTION = timedelta(days=7)
DEFAULT_NOTIFICATION_LEASE = timedelta(minutes=5)


class Store:
    """Typed access to everything watchdog-gpu records."""

    def __init__(self, engine: Engine, *, keep_history: bool = True) -> None:
        """``keep_history``: keep recent samples, probes and account snapshots in memory between
        fleet-view loads (SQLite only: exact only where writers are serialised and ids grow
        with each commit, see store/history.py). False reads everything on every load."""
        self.engine = engine
        self._readers = sessionmaker(engine, expire_on_commit=False)
        self._write_engine = writing(engine)
        self._writers = sessionmaker(self._write_engine, expire_on_commit=False)
        sqlite = engine.dialect.name == "sqlite"
        self._history = FleetHistory() if keep_history and sqlite else None
        # The leader's fence on a shared PostgreSQL (store/leadership.py): when set, every
        # write transaction first proves its epoch is current and its lock session still holds
        # the lock, or raises LeadershipLostError — a deposed leader writes nothing.
        self.fence: Fence | None = None
        self._batch = threading.local()  # .state: the thread's open _Batch, if any
        # What the instance rows hold: a poll rewrites only the instances that changed.
        self._written = WrittenInstances()

    # -- transactions ---------------------------------------------------------------------

    def check_leadership(self) -> None:
        """Raise LeadershipLostError unless this store's fence holds right now (nothing to check
        without one): what a leader proves before each provider call (daemon.py)."""
        if self.fence is None:
            return
        with _store_errors(), self._write_engine.begin() as connection:
            check_fence(connection, self.fence)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Every call of this thread inside the block shares one write transaction, committed at
        the end (rolled back when the block raises): a phase of a tick — the polls, a probe
        round, an evaluation's findings and decisions — is one commit instead of one per account
        or decision (each commit rewrites the pages it touched in the WAL). The transaction
        begins at the first call that needs it; ``load_fleet_view`` and ``latest_instances``
        keep reading committed state on their own connection. Nested blocks join the outer
        one."""
        if getattr(self._batch, "state", None) is not None:
            yield
            return
        state = _Batch()
        self._batch.state = state
        try:
            yield
            if state.connection is not None:
                with _store_errors():
                    state.connection.commit()
            for committed in state.after_commit:
                committed()
        finally:
            self._batch.state = None
            if state.connection is not None:
                state.connection.close()  # rolls back what was not committed

    def _batch_connection(self) -> Connection | None:
        state: _Batch | None = getattr(self._batch, "state", None)
        if state is None:
            return None
        if state.connection is None:
            with _store_errors():
                connection = self._write_engine.connect()
                try:
                    connection.begin()
                    if self.fence is not None:
                        check_fence(connection, self.fence)
                except BaseException:
                    connection.close()
                    raise
            state.connection = connection
        return state.connection

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Session]:
        shared = self._batch_connection()
        if shared is not None:
            # Joins the batch's transaction: the session's commit only flushes.
            with _store_errors(), Session(bind=shared, expire_on_commit=False) as session:
                yield session
                session.commit()
            return
        factory = self._writers if write else self._readers
        with _store_errors(), factory.begin() as session:
            if write and self.fence is not None:
                check_fence(session, self.fence)
            yield session

    @contextmanager
    def _connection(self, *, write: bool, own: bool = False) -> Iterator[Connection]:
        """One transaction on a Core connection, for the paths every tick takes (polls, probes,
        the fleet view): an ORM session costs more than the statements of a small tick.
        ``own``: never the batch's connection (reads whose results are cached must only see
        committed rows)."""
        shared = None if own else self._batch_connection()
        if shared is not None:
            with _store_errors():
                yield shared
            return
        with _store_errors(), (self._write_engine if write else self.engine).begin() as connection:
            if write and self.fence is not None:
                check_fence(connection, self.fence)
            yield connection

    # -- observations ---------------------------------------------------------------------

    def record_observation(self, observation: AccountObservation, now: datetime) -> None:
        """Record one complete poll of one account, in one transaction.

        Instances are upserted; each instance's current history span is extended (its
        ``last_seen`` moves to ``now``) or, when the state or a rate changed, a new span opens at
        ``now``. An instance recorded before, not gone, and absent from this (complete) listing
        becomes ``gone`` with a new span, and its pinned host key is forgotten. Also records the
        account snapshot, the volumes (absent ones are marked gone), the SSH keys (absent ones
        are deleted) and a successful poll; a part named in ``observation.problems``
        (``account``, ``volumes``, ``ssh_keys``) failed and is skipped, keeping what was recorded
        before. Raises ValueError when an instance belongs to another account than the
        observation's.
        """
        try:
            with self._connection(write=True) as connection:
                written = observations.record_observation(
                    connection, observation, now, self._written
                )
        except BaseException:
            # Some of it may be written (or committed with the batch): start over from the rows.
            self._written.forget_all()
            raise
        self._after_commit(lambda: self._written.remember(written))

    def _after_commit(self, call: Callable[[], None]) -> None:
        """Call ``call`` once what this thread wrote is committed: now, or at the end of its
        batch (never, when the batch rolls back)."""
        state: _Batch | None = getattr(self._batch, "state", None)
        if state is None:
            call()
        else:
            state.after_commit.append(call)

    def record_poll_failure(
        self, account: str, provider: str, error_kind: str, message: str, now: datetime
    ) -> None:
        """Remember that polling ``account`` failed with ``error_kind`` (a ProviderError.kind).
        Nothing else changes: an unreachable API says nothing about the instances."""
        with self._transaction(write=True) as session:
            observations.record_poll_failure(
                session, account, provider, error_kind=error_kind, message=message, now=now
            )

    def record_probe(self, outcome: ProbeOutcome) -> None:
        """Record a probe outcome and its GPU samples in one transaction."""
        with self._connection(write=True) as connection:
            observations.record_probes(connection, [outcome])

    def record_probes(self, outcomes: Iterable[ProbeOutcome]) -> None:
        """Record many probe outcomes (and their samples) in one transaction: a probe round
        over a large fleet costs one commit instead of one per instance."""
        with self._connection(write=True) as connection:
            observations.record_probes(connection, outcomes)

    def record_samples(self, samples: Iterable[GpuSample]) -> None:
        """Record GPU samples that came without an SSH probe (e.g. RunPod's API utilisation)."""
        with self._connection(write=True) as connection:
            observations.record_samples(connection, samples)

    # -- reading --------------------------------------------------------------------------

    def load_fleet_view(
        self,
        now: datetime,
        lookback: timedelta,
        spend_since: datetime,
        accounts: Mapping[str, str] | None = None,
        *,
        notification_lookback: timedelta = DEFAULT_NOTIFICATION_LOOKBACK,
        cached: bool = True,
        activity: bool = False,
    ) -> FleetView:
        """The read-only view the rules and the planner decide from, as of ``now``.

        ``accounts`` maps the configured account names to their providers (every configured
        account gets an AccountView, polled or not; only their instances are in the view); None
        means every recorded account. Instances: every one not gone, plus gone ones with history
        since ``min(spend_since, now - lookback)``; spans are those overlapping that window plus
        the whole run of the current state; samples and probes cover ``[now - lookback, now]``.
        Also: present volumes, SSH keys, every protection, active snoozes, actions of the last
        24 hours and any still in flight, and the notification keys of ``notification_lookback``.
        ``cached=False`` reads everything from the database and leaves the warm history of the
        evaluations alone (a view of another window, e.g. the digest's, would narrow it).
        ``activity``: with the activity marks of the window (the spend report's).
        """
        with self._connection(write=False, own=True) as connection:
            return fleet_loader.load_fleet_view(
                connection,
                now=now,
                lookback=lookback,
                spend_since=spend_since,
                accounts=accounts,
                notification_lookback=notification_lookback,
                history=self._history if cached else None,
                activity=activity,
            )

    def load_status_view(
        self, now: datetime, lookback: timedelta, spend_since: datetime, threshold_percent: float
    ) -> FleetView:
        """:meth:`load_fleet_view` with only the samples ``status`` reads with
        ``threshold_percent``: each instance's GPU activity is the whole window's, from fewer
        samples (``fleet_loader._STATUS_SAMPLES``)."""
        with self._connection(write=False, own=True) as connection:
            return fleet_loader.load_fleet_view(
                connection,
                now=now,
                lookback=lookback,
                spend_since=spend_since,
                accounts=None,
                notification_lookback=DEFAULT_NOTIFICATION_LOOKBACK,
                status_threshold=threshold_percent,
            )

    def latest_instances(self, *, include_gone: bool = False) -> list[InstanceRecord]:
        """The latest snapshot of every instance (gone ones only when asked), by account and id."""
        with self._connection(write=False, own=True) as connection:
            return fleet_loader.instance_records(connection, include_gone=include_gone)

    def instance_count(self) -> int:
        """How many instances are not gone: ``len(latest_instances())`` without building their
        records (the daemon's status line counts them after every evaluation)."""
        with self._connection(write=False, own=True) as connection:
            return fleet_loader.instance_count(connection)

    def latest_seen(self) -> datetime | None:
        """When a present (not gone) instance was last seen, the newest such time; None without
        one. ``status`` dates its view by it without building every instance's record."""
        with self._connection(write=False, own=True) as connection:
            return fleet_loader.latest_seen(connection)

    def latest_accounts(self) -> list[AccountRecord]:
        """Every recorded account with its latest money facts and poll status, by name."""
        with self._transaction(write=False) as session:
            snapshots = fleet_loader.latest_account_snapshots(session)
            return [
                AccountRecord(
                    view=convert.account_view(row, row.name, row.provider, snapshots.get(row.name)),
                    last_poll_error_message=row.last_poll_error_message,
                )
                for row in session.scalars(select(Account).order_by(Account.name))
            ]

    # -- action outbox --------------------------------------------------------------------

    def enqueue_action(self, action: PlannedAction, status: str = ActionStatus.PENDING) -> bool:
        """Write ``action`` to the outbox with ``status`` (an ActionStatus value: ``dry_run``
        and ``blocked`` record an action that will not run). Returns False, changing nothing,
        when its idempotency key is already there."""
        with self._transaction(write=True) as session:
            return outbox.enqueue_action(session, action, status)

    def claim_actions(
        self,
        now: datetime,
        claimer: str,
        limit: int = 10,
        statuses: Sequence[str] = (ActionStatus.PENDING,),
        *,
        reclaim_stale_after: timedelta | None = None,
    ) -> list[ActionRow]:
        """Claim up to ``limit`` actions whose status is in ``statuses`` and whose
        ``next_attempt_at`` is unset or due, oldest first: each becomes ``claimed`` by
        ``claimer`` (``claimed_from`` keeps the status it had, ``attempts`` counts up) through a
        compare-and-set, so concurrent claimers never get the same action. With
        ``reclaim_stale_after``, actions left ``claimed`` longer than that (a crashed executor)
        are claimed again too. Returns the claimed rows."""
        with self._transaction(write=True) as session:
            return outbox.claim_actions(
                session,
                now=now,
                claimer=claimer,
                limit=limit,
                statuses=tuple(ActionStatus(status).value for status in statuses),
                reclaim_stale_after=reclaim_stale_after,
            )

    def transition_action(
        self,
        key: str,
        expected_status: str,
        new_status: str,
        now: datetime,
        *,
        result: ActionResult | None = None,
        last_error: str | None = None,
        next_attempt_at: datetime | None = None,
    ) -> bool:
        """Move the action ``key`` from ``expected_status`` to ``new_status`` (compare-and-set):
        False, changing nothing, when it is not in ``expected_status``. Fields given (not None)
        are set too; ``next_attempt_at`` makes a retry wait."""
        with self._transaction(write=True) as session:
            return outbox.transition_action(
                session,
                key,
                expected_status=expected_status,
                new_status=new_status,
                now=now,
                result=result,
                last_error=last_error,
                next_attempt_at=next_attempt_at,
            )

    def get_action(self, key: str) -> ActionRow | None:
        with self._transaction(write=False) as session:
            return outbox.get_action(session, key)

    def list_actions(
        self, statuses: Sequence[str] | None = None, since: datetime | None = None
    ) -> list[ActionRow]:
        """Actions (with a status in ``statuses``, created at or after ``since``), oldest first."""
        wanted = None if statuses is None else tuple(ActionStatus(s).value for s in statuses)
        with self._transaction(write=False) as session:
            return outbox.list_actions(session, wanted, since)

    # -- notification outbox --------------------------------------------------------------

    def enqueue_notification(self, notification: PlannedNotification) -> bool:
        """Write ``notification`` to the outbox, due at its ``created_at``. Returns False,
        changing nothing, when its idempotency key is already there."""
        with self._transaction(write=True) as session:
            return outbox.enqueue_notification(session, notification)

    def claim_due_notifications(
        self, now: datetime, limit: int = 50, *, lease: timedelta = DEFAULT_NOTIFICATION_LEASE
    ) -> list[NotificationRow]:
        """Claim up to ``limit`` undelivered notifications that are due, oldest first.

        A claim pushes ``next_attempt_at`` to ``now + lease`` (compare-and-set): nobody else
        gets it meanwhile, and if the claimer dies it is due again after the lease (delivery is
        at least once). Mark each delivered or failed afterwards.
        """
        with self._transaction(write=True) as session:
            return outbox.claim_due_notifications(session, now=now, limit=limit, lease=lease)

    def mark_notification_delivered(self, key: str, now: datetime) -> None:
        """Record delivery (a no-op when unknown or already delivered)."""
        with self._transaction(write=True) as session:
            outbox.mark_notification_delivered(session, key, now)

    def mark_notification_failed(
        self, key: str, now: datetime, error: str, next_attempt_at: datetime
    ) -> None:
        """Count a failed delivery (``attempts`` + 1, ``last_error``); it is due again at
        ``next_attempt_at`` (not before ``now``). A no-op when unknown or already delivered."""
        with self._transaction(write=True) as session:
            outbox.mark_notification_failed(session, key, error, max(now, next_attempt_at))

    def get_notification(self, key: str) -> NotificationRow | None:
        with self._transaction(write=False) as session:
            return outbox.get_notification(session, key)

    def notification_backlog(self) -> int:
        """How many notifications are not delivered yet."""
        with self._transaction(write=False) as session:
            return outbox.notification_backlog(session)

    # -- audit ----------------------------------------------------------------------------

    def add_audit_event(
        self,
        kind: str,
        now: datetime,
        *,
        account: str | None = None,
        instance_id: str | None = None,
        rule: str | None = None,
        message: str = "",
        data: Mapping[str, JsonValue] | None = None,
    ) -> None:
        """Append an event to the audit history (``data`` must be JSON-serialisable)."""
        with self._transaction(write=True) as session:
            decisions.append_audit(
                session,
                now,
                kind,
                message,
                account=account,
                instance_id=instance_id,
                rule=rule,
                data=data,
            )

    def list_audit_events(
        self,
        since: datetime | None = None,
        limit: int | None = None,
        *,
        account: str | None = None,
        instance_id: str | None = None,
    ) -> list[AuditEvent]:
        """Audit events (at or after ``since``, of ``account``/``instance_id``), oldest first;
        with ``limit``, the most recent ``limit`` of them."""
        query = select(AuditEventRow)
        if since is not None:
            query = query.where(AuditEventRow.at >= since)
        if account is not None:
            query = query.where(AuditEventRow.account == account)
        if instance_id is not None:
            query = query.where(AuditEventRow.instance_id == instance_id)
        query = query.order_by(AuditEventRow.at.desc(), AuditEventRow.id.desc())
        if limit is not None:
            query = query.limit(limit)
        with self._transaction(write=False) as session:
            events = [convert.audit_event(row) for row in session.scalars(query)]
        events.reverse()
        return events

    # -- findings -------------------------------------------------------------------------

    def record_findings(self, findings: Iterable[Finding], now: datetime) -> None:
        """Record this tick's findings, one row per episode: a known episode keeps its
        ``first_seen`` and gets ``last_seen = now`` and the latest summary and evidence."""
        with self._connection(write=True) as connection:
            findings_store.record_findings(connection, findings, now)

    def list_findings(self, seen_since: datetime | None = None) -> list[FindingRecord]:
        """Recorded finding episodes (last seen at or after ``seen_since``), oldest first."""
        with self._connection(write=False) as connection:
            return fleet_loader.finding_records(connection, seen_since)

    # -- job marks ------------------------------------------------------------------------

    def mark(self, process: str, name: str, at: datetime) -> None:
        """Record that engine ``process`` finished phase ``name`` at ``at`` (inside a batch: in
        its transaction, so the mark is seen exactly when what the phase wrote is)."""
        with self._connection(write=True) as connection:
            marks_store.write_mark(connection, process, name, at)

    def marks(self, process: str) -> dict[str, datetime]:
        """``process``'s committed marks (its own uncommitted ones inside its batch), by name."""
        with self._connection(write=False) as connection:
            return marks_store.read_marks(connection, process)

    def latest_mark_at(self, name: str) -> datetime | None:
        """The newest mark ``name`` of any process (see ``store/marks.py``)."""
        with self._connection(write=False) as connection:
            return marks_store.latest_mark_at(connection, name)

    # -- activity marks (store/activity.py) -----------------------------------------------

    def current_activity(self) -> dict[str, ActivityMark | None]:
        """Every present instance's newest activity mark, by "account/instance_id"."""
        with self._connection(write=False) as connection:
            return activity_store.current_marks(connection)

    def record_activity(self, marks: Sequence[tuple[str, ActivityMark]], now: datetime) -> int:
        """Append activity marks (instance key, mark) recorded at ``now``; how many."""
        with self._connection(write=True) as connection:
            return activity_store.record_marks(connection, marks, now)

    # -- protections and snoozes ----------------------------------------------------------

    def add_protection(
        self,
        kind: ProtectionKind,
        value: str,
        now: datetime,
        *,
        account: str | None = None,
        reason: str = "",
    ) -> bool:
        """Protect instances matching ``kind``/``value`` (narrowed to ``account`` if given).
        False when the same protection exists already."""
        with self._transaction(write=True) as session:
            if _find_protection(session, kind, value, account) is not None:
                return False
            session.add(
                ProtectionRow(
                    kind=kind.value, value=value, account=account, reason=reason, created_at=now
                )
            )
            return True

    def remove_protection(
        self, kind: ProtectionKind, value: str, *, account: str | None = None
    ) -> bool:
        """Remove a protection; False when there was none."""
        with self._transaction(write=True) as session:
            row = _find_protection(session, kind, value, account)
            if row is None:
                return False
            session.delete(row)
            return True

    def list_protections(self) -> list[Protection]:
        with self._transaction(write=False) as session:
            rows = session.scalars(select(ProtectionRow).order_by(ProtectionRow.id))
            return [convert.protection(row) for row in rows]

    def add_snooze(
        self, account: str, instance_id: str, until: datetime, now: datetime, reason: str = ""
    ) -> Snooze:
        """Postpone destructive actions for the instance until ``until`` (the caller bounds it
        by the configured maximum). Raises ValueError when ``until`` is not after ``now``."""
        if until <= now:
            raise ValueError("a snooze must end after now")
        with self._transaction(write=True) as session:
            row = SnoozeRow(
                account=account, instance_id=instance_id, until=until, created_at=now, reason=reason
            )
            session.add(row)
            return convert.snooze(row)

    def list_snoozes(self, now: datetime) -> list[Snooze]:
        """The snoozes still active at ``now``."""
        with self._transaction(write=False) as session:
            rows = session.scalars(
                select(SnoozeRow).where(SnoozeRow.until > now).order_by(SnoozeRow.id)
            )
            return [convert.snooze(row) for row in rows]

    # -- pinned SSH host keys -------------------------------------------------------------

    def get_pinned_host_key(self, account: str, instance_id: str) -> tuple[str, str] | None:
        """``(key_type, key_base64)`` pinned for the instance, or None."""
        with self._transaction(write=False) as session:
            row = _find_host_key(session, account, instance_id)
            return (row.key_type, row.key_base64) if row is not None else None

    def pinned_host_keys(self) -> dict[tuple[str, str], tuple[str, str]]:
        """Every pinned key: ``(account, instance_id)`` → ``(key_type, key_base64)``."""
        with self._transaction(write=False) as session:
            rows = session.scalars(select(PinnedHostKey))
            return {(r.account, r.instance_id): (r.key_type, r.key_base64) for r in rows}

    def pin_host_key(
        self, account: str, instance_id: str, key_type: str, key_base64: str, now: datetime
    ) -> None:
        """Pin the key first seen for the instance (accept-new). When a key is pinned already
        nothing changes (the first key wins): replacing one takes ``forget_host_key`` first."""
        with self._transaction(write=True) as session:
            pinned = _find_host_key(session, account, instance_id)
            if pinned is not None:
                if (pinned.key_type, pinned.key_base64) != (key_type, key_base64):
                    logger.warning(
                        "host key already pinned, not replaced account=%s instance=%s",
                        account,
                        instance_id,
                    )
                return
            session.add(
                PinnedHostKey(
                    account=account,
                    instance_id=instance_id,
                    key_type=key_type,
                    key_base64=key_base64,
                    first_seen=now,
                )
            )

    def forget_host_key(self, account: str, instance_id: str) -> None:
        """Drop the instance's pinned key, if any (``record_observation`` does it by itself
        when an instance is gone)."""
        with self._transaction(write=True) as session:
            row = _find_host_key(session, account, instance_id)
            if row is not None:
                session.delete(row)

    # -- decisions and executor steps (atomic with their audit event and message) -----------

    def record_decision(
        self,
        now: datetime,
        *,
        audit_kind: str,
        message: str,
        action: PlannedAction | None = None,
        action_status: str = ActionStatus.PENDING,
        notification: PlannedNotification | None = None,
        account: str | None = None,
        instance_id: str | None = None,
        rule: str | None = None,
        data: Mapping[str, JsonValue] | None = None,
    ) -> bool:
        """Enqueue an action and/or a notification and, if either is new, its audit event, in
        one transaction. False (nothing written) when an earlier tick recorded it already."""
        with self._transaction(write=True) as session:
            return decisions.record_decision(
                session,
                now,
                audit_kind=audit_kind,
                message=message,
                action=action,
                action_status=ActionStatus(action_status).value,
                notification=notification,
                account=account,
                instance_id=instance_id,
                rule=rule,
                data=data,
            )

    def record_action_step(
        self,
        key: str,
        expected_status: str,
        new_status: str,
        now: datetime,
        *,
        audit_kind: str,
        message: str,
        data: Mapping[str, JsonValue] | None = None,
        notification: PlannedNotification | None = None,
        result: ActionResult | None = None,
        last_error: str | None = None,
        next_attempt_at: datetime | None = None,
    ) -> bool:
        """Compare-and-set ``key`` to ``new_status`` and, if it moved, append the audit event
        and enqueue ``notification`` in the same transaction."""
        with self._transaction(write=True) as session:
            row = outbox.get_action(session, key)
            if row is None:
                return False
            return decisions.record_action_step(
                session,
                key,
                ActionStatus(expected_status).value,
                ActionStatus(new_status).value,
                now,
                audit_kind=audit_kind,
                message=message,
                account=row.account,
                instance_id=row.instance_id,
                rule=row.rule,
                data=data,
                notification=notification,
                result=result,
                last_error=last_error,
                next_attempt_at=next_attempt_at,
            )

    def leader(self) -> Leader | None:
        """Who leads the watchdogs sharing this database (PostgreSQL; None: nobody ever led,
        as on SQLite, where one daemon holds a file lock instead)."""
        with _store_errors():
            return read_leader(self.engine)

    def fuse_latched(self) -> bool:
        """True while the blast-radius fuse is tripped and no human has reset it."""
        with self._transaction(write=False) as session:
            return decisions.fuse_latched(session)

    def record_fuse_trip(
        self, now: datetime, reason: str, notification: PlannedNotification
    ) -> None:
        """Latch the fuse: audit event and critical message together."""
        with self._transaction(write=True) as session:
            if decisions.fuse_latched(session):
                return
            outbox.enqueue_notification(session, notification)
            decisions.append_audit(
                session,
                now,
                FUSE_TRIPPED,
                reason,
                account=None,
                instance_id=None,
                rule=None,
                data=None,
            )

    def reset_fuse(self, now: datetime, who: str = "cli") -> int:
        """A human resets the fuse: the latch clears and fuse-blocked actions are cancelled (the
        planner re-plans them from fresh findings, so nothing stale is executed). Returns how
        many actions were cancelled."""
        with self._transaction(write=True) as session:
            cancelled = outbox.cancel_blocked_actions(session, now)
            decisions.append_audit(
                session,
                now,
                FUSE_RESET,
                f"fuse reset by {who}; {cancelled} blocked actions cancelled",
                account=None,
                instance_id=None,
                rule=None,
                data={"cancelled": cancelled},
            )
            return cancelled

    def instance_snapshot(self, account: str, instance_id: str) -> InstanceSnapshot | None:
        """The latest recorded snapshot of one instance (gone ones included)."""
        with self._transaction(write=False) as session:
            row = session.scalar(
                select(Instance).where(
                    and_(Instance.account == account, Instance.instance_id == instance_id)
                )
            )
            return convert.instance_snapshot(row) if row is not None else None

    # -- retention ------------------------------------------------------------------------

    def prune(
        self,
        now: datetime,
        sample_retention: timedelta = DEFAULT_SAMPLE_RETENTION,
        *,
        raw_samples_for: timedelta = RAW_SAMPLES_FOR,
    ) -> int:
        """Retention: GPU samples older than ``raw_samples_for`` (whole hours) are rolled up
        into hourly counts (store/rollup.py); samples, rollups, probe outcomes and account
        snapshots older than ``now - sample_retention`` are deleted (each account keeps its
        newest snapshot). History spans, audit events, findings, actions and notifications are
        kept. Only the deleted rows leave the fleet view's cache. Returns the rows deleted
        (samples rolled up included)."""
        cutoff = now - sample_retention
        rolled_before = hour_of(now - raw_samples_for)
        samples, probes = Deleted(), Deleted()
        if raw_samples_for < sample_retention:
            samples, written = rollup.roll_up(
                lambda: self._connection(write=True, own=True), cutoff, rolled_before
            )
            if written:
                logger.info("rolled up samples=%d hourly_rows=%d", samples.rows, written)
        newest_snapshots = select(func.max(AccountSnapshotRow.id)).group_by(
            AccountSnapshotRow.account
        )
        others = (
            delete(GpuSampleRollupRow).where(GpuSampleRollupRow.last_at < cutoff),
            delete(AccountSnapshotRow).where(
                AccountSnapshotRow.observed_at < cutoff,
                AccountSnapshotRow.id.not_in(newest_snapshots),
            ),
        )
        # Its own transactions even inside a batch: the cache is trimmed after each commit.
        with self._connection(write=True, own=True) as connection:
            samples += rollup.delete_rows(
                connection, rollup.SAMPLES, delete(GpuSampleRow).where(GpuSampleRow.at < cutoff)
            )
            probes = rollup.delete_rows(
                connection, PROBES, delete(ProbeOutcomeRow).where(ProbeOutcomeRow.at < cutoff)
            )
            deleted = samples.rows + probes.rows
            for statement in others:
                deleted += outbox.changed_rows(connection.execute(statement))
        if self._history is not None:
            # Only what was deleted leaves the cache (no cold load after every prune), unless
            # the newest rows went too (their ids come back).
            history = self._history
            history.samples.evict_before(max(cutoff, rolled_before), reset=samples.newest)
            history.probes.evict_before(cutoff, reset=probes.newest)
        logger.info("pruned old rows deleted=%d cutoff=%s", deleted, cutoff.isoformat())
        return deleted

    def gpu_hours(
        self, account: str, instance_id: str, since: datetime | None = None
    ) -> list[GpuHour]:
        """The hourly rollups of the instance's GPU samples (those older than the raw retention;
        hour at or after ``since``), by hour and GPU; rows of the same hour and GPU added
        together."""
        with self._connection(write=False) as connection:
            return rollup.gpu_hours(connection, account, instance_id, since)


@dataclass
class _Batch:
    """A thread's open batch: its connection once a call needed it."""

    connection: Connection | None = None
    after_commit: list[Callable[[], None]] = field(default_factory=list)


@contextmanager
def _store_errors() -> Iterator[None]:
    """Database failures as StoreError (the driver's reason, never the SQL parameters); a bad
    value (naive datetime, wrong type) as its own error."""
    try:
        yield
    except DBAPIError as error:
        raise StoreError(f"database error: {error.orig}") from error
    except StatementError as error:
        if isinstance(error.orig, NaiveDatetimeError | TypeError | ValueError):
            raise error.orig from None
        raise StoreError(f"database error: {error.orig}") from error
    except SQLAlchemyError as error:
        raise StoreError(f"database error: {type(error).__name__}") from error


def _find_protection(
    session: Session, kind: ProtectionKind, value: str, account: str | None
) -> ProtectionRow | None:
    account_matches = (
        ProtectionRow.account.is_(None) if account is None else ProtectionRow.account == account
    )
    return session.scalar(
        select(ProtectionRow).where(
            ProtectionRow.kind == kind.value, ProtectionRow.value == value, account_matches
        )
    )


def _find_host_key(session: Session, account: str, instance_id: str) -> PinnedHostKey | None:
    return session.scalar(
        select(PinnedHostKey).where(
            and_(PinnedHostKey.account == account, PinnedHostKey.instance_id == instance_id)
        )
    )
