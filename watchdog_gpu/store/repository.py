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
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Engine, Table, and_, delete, func, select

from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import (
    AccountObservation,
    ActivityMark,
    Finding,
    GpuSample,
    InstanceSnapshot,
    ProbeOutcome,
)
from watchdog_gpu.store import activity as activity_store
from watchdog_gpu.store import convert, fleet_loader, observations, outbox, rollup
from watchdog_gpu.store import findings as findings_store
from watchdog_gpu.store import marks as marks_store
from watchdog_gpu.store.history import FleetHistory
from watchdog_gpu.store.host_key_access import HostKeyAccess
from watchdog_gpu.store.outbox_access import OutboxAccess
from watchdog_gpu.store.protection_access import ProtectionAccess
from watchdog_gpu.store.rollup import RAW_SAMPLES_FOR, Deleted, GpuHour, hour_of
from watchdog_gpu.store.rows import (
    AccountRecord,
    FindingRecord,
    InstanceRecord,
)
from watchdog_gpu.store.schema import (
    Account,
    AccountSnapshotRow,
    GpuSampleRollupRow,
    GpuSampleRow,
    Instance,
    ProbeOutcomeRow,
)
from watchdog_gpu.store.values import DEFAULT_NOTIFICATION_LOOKBACK
from watchdog_gpu.store.written_instances import WrittenInstances

logger = logging.getLogger(__name__)

PROBES = cast(Table, ProbeOutcomeRow.__table__)

DEFAULT_SAMPLE_RETENTION = timedelta(days=7)


class Store(OutboxAccess, ProtectionAccess, HostKeyAccess):
    """Typed access to everything watchdog-gpu records.

    By concern: transactions, batches and the leader's fence (store/transactions.py); the
    outboxes, decisions, fuse and audit (store/outbox_access.py); protections and snoozes
    (store/protection_access.py); pinned SSH host keys (store/host_key_access.py); here, the
    observations, the fleet view and what it reads, findings, job marks and retention."""

    def __init__(self, engine: Engine, *, keep_history: bool = True) -> None:
        """``keep_history``: keep recent samples, probes and account snapshots in memory between
        fleet-view loads (SQLite only: exact only where writers are serialised and ids grow
        with each commit, see store/history.py). False reads everything on every load."""
        super().__init__(engine)
        sqlite = engine.dialect.name == "sqlite"
        self._history = FleetHistory() if keep_history and sqlite else None
        # What the instance rows hold: a poll rewrites only the instances that changed.
        self._written = WrittenInstances()

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
