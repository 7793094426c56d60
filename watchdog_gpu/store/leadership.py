"""Leader election for watchdogs that share one PostgreSQL database.

The leader holds a session-level advisory lock on a connection of its own; every write
transaction first proves that lock is still held (the fence), and a standby that takes over
ends the old leader's open transactions and raises the epoch, so no destroy is called twice.
A standby only retries the lock. Exact semantics: ``docs/postgresql.md``, "Leader election".
SQLite keeps its one-daemon file lock (``store/lock.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, create_engine, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from watchdog_gpu.clock import Clock, SystemClock
from watchdog_gpu.errors import StoreError
from watchdog_gpu.store import convert
from watchdog_gpu.store.engine import postgres_connect_args
from watchdog_gpu.store.lock import LockHeldError, LockHolder
from watchdog_gpu.store.migrate_process import upgrade_in_child_process
from watchdog_gpu.store.rows import DEFAULT_LEADER_LEASE_SECONDS, Leader
from watchdog_gpu.store.schema import LeadershipRow

log = logging.getLogger(__name__)

# The advisory lock's key: any fixed 64-bit number other applications on the same database are
# unlikely to use ("wdgpu" in ASCII).
ADVISORY_LOCK_KEY = 0x7764677075
LEADERSHIP_ROW = 1
RETRY_SECONDS = 1.0
# A leader's lock session that ran no statement for this long is presumed frozen or cut off: a
# standby terminates it (the leader renews every <= 5 s: daemon.py's leadership watcher).
LEASE_SECONDS = DEFAULT_LEADER_LEASE_SECONDS
# How long leadership work waits for a row or lock before it gives up and says so.
LOCK_TIMEOUT = "5s"

# pg_locks shows a bigint advisory key as (classid, objid) = (high, low) 32 bits, objsubid 1.
_LOCK_KEY = {"high": ADVISORY_LOCK_KEY >> 32, "low": ADVISORY_LOCK_KEY & 0xFFFFFFFF}
_HOLDS_LOCK = text(
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND classid = :high AND objid = :low AND objsubid = 1 AND pid = :pid)"
)
# Transactions that passed a fence: only the fence takes a shared row lock on the leadership
# table (readers take no row lock), so every other holder is a deposed leader's.
_FENCED_TRANSACTIONS = text(
    "SELECT pid, pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'relation'"
    " AND relation = 'leadership'::regclass AND mode = 'RowShareLock' AND granted"
    " AND pid <> pg_backend_pid()"
)
_SILENT_HOLDER = text(
    "SELECT a.pid, pg_terminate_backend(a.pid) FROM pg_locks l"
    " JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :high AND l.objid = :low"
    " AND l.objsubid = 1 AND a.pid <> pg_backend_pid() AND a.state <> 'active'"
    " AND now() - a.state_change > make_interval(secs => :lease)"
)


@dataclass(frozen=True, slots=True)
class Fence:
    """What a leader's write transactions prove: the epoch is still ``epoch`` and the session
    ``lock_session`` (a ``pg_backend_pid()``) still holds the advisory lock."""

    epoch: int
    lock_session: int


class LeadershipLostError(StoreError):
    """This process no longer leads: another node took over (its epoch is newer)."""


def read_leader(engine: Engine) -> Leader | None:
    """The leadership row of the database behind ``engine`` (``None``: nobody ever led)."""
    with engine.connect() as connection:
        row = connection.execute(
            select(LeadershipRow.__table__).where(LeadershipRow.id == LEADERSHIP_ROW)
        ).first()
    return None if row is None else convert.leader(row)


def someone_leads(engine: Engine) -> bool:
    """Whether a session holds the leadership lock of the database behind ``engine`` now."""
    with engine.connect() as connection:
        held = connection.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND classid = :high AND objid = :low AND objsubid = 1)"
            ),
            _LOCK_KEY,
        ).scalar_one()
    return bool(held)


def check_fence(session_or_connection: Session | Connection, fence: Fence) -> None:
    """Raise LeadershipLostError unless the database's epoch is ``fence.epoch`` and this node's
    lock session still holds the advisory lock. Takes a shared lock on the leadership row until
    the caller's transaction ends: a standby taking over terminates such transactions."""
    current = session_or_connection.execute(
        select(LeadershipRow.epoch)
        .where(LeadershipRow.id == LEADERSHIP_ROW)
        .with_for_update(read=True)
    ).scalar_one_or_none()
    if current != fence.epoch:
        raise LeadershipLostError(
            f"this watchdog no longer leads (epoch {fence.epoch}, the database says {current}): "
            "another node took over"
        )
    holds = session_or_connection.execute(
        _HOLDS_LOCK, {**_LOCK_KEY, "pid": fence.lock_session}
    ).scalar_one()
    if not holds:
        raise LeadershipLostError(
            "this watchdog no longer leads: its lock session ended (a standby may take over)"
        )


class PostgresLeadership:
    """The advisory lock and epoch of one node (a ``DatabaseLock``, see store/lock.py)."""

    def __init__(
        self, url: str, *, role: str, node: str, database: str, clock: Clock | None = None
    ) -> None:
        self._url = make_url(url)
        self.role = role
        self.node = node
        self.database = database
        self.clock = clock or SystemClock()
        self.epoch: int | None = None
        self.lock_session: int | None = None
        self._engine: Engine | None = None
        self._connection: Connection | None = None
        self._guard = threading.Lock()

    # -- the DatabaseLock seam ------------------------------------------------------------

    def acquire(self, *, wait_seconds: float = 0.0) -> None:
        """Lead, trying for up to ``wait_seconds``; LockHeldError names the current leader."""
        deadline = self.clock.monotonic() + wait_seconds
        while not self.try_acquire():
            if self.clock.monotonic() >= deadline:
                raise LockHeldError(self._holder(), self.database, self.role)
            self.clock.sleep(min(RETRY_SECONDS, max(wait_seconds, 0.05)))

    def release(self) -> None:
        with self._guard:
            connection, self._connection = self._connection, None
            engine, self._engine = self._engine, None
            self.epoch = None
            self.lock_session = None
        if connection is not None:
            try:
                connection.execute(
                    text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK_KEY}
                )
            except SQLAlchemyError:
                pass  # the connection is gone: so is the lock
            finally:
                connection.close()
        if engine is not None:
            engine.dispose()

    @property
    def fence(self) -> Fence:
        """What this leader's store proves in every write transaction (see :func:`check_fence`).
        Raises LeadershipLostError when it does not lead."""
        epoch, session = self.epoch, self.lock_session
        if epoch is None or session is None:
            raise LeadershipLostError("this watchdog does not lead")
        return Fence(epoch=epoch, lock_session=session)

    # -- election ---------------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """One attempt: True when this node now leads (the epoch was counted up)."""
        with self._guard:
            if self.epoch is not None:
                return True
            try:
                connection = self._lock_connection()
                taken = connection.execute(
                    text("SELECT pg_try_advisory_lock(:key)"), {"key": ADVISORY_LOCK_KEY}
                ).scalar_one()
                if not taken:
                    return False
                self.lock_session = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
                # Only the lock holder migrates: two nodes starting on an empty database (or
                # a new version taking over) never run the migrations at the same time. In a
                # child process: the daemon keeps no Alembic resident (migrate_process.py).
                assert self._engine is not None
                upgrade_in_child_process(
                    self._engine, self._url.render_as_string(hide_password=False)
                )
                self.epoch = self._next_epoch()
            except (SQLAlchemyError, StoreError) as error:
                self._drop_connection()
                if isinstance(error, StoreError):
                    raise
                raise StoreError(
                    f"cannot take the leadership of {self.database}: {_reason(error)}"
                ) from error
        log.info("leading node=%s epoch=%d", self.node, self.epoch)
        return True

    def wait_for_leadership(
        self,
        stop: threading.Event,
        retry_seconds: float = RETRY_SECONDS,
        *,
        lease_seconds: float = LEASE_SECONDS,
    ) -> bool:
        """Stand by until this node leads (True) or ``stop`` is set (False). A database that
        cannot be reached meanwhile is retried, never fatal: a standby waits out outages. A
        leader whose lock session was silent for ``lease_seconds`` is deposed (its session
        terminated), so a frozen or cut-off leader is replaced."""
        announced: str | None = None
        while not stop.is_set():
            try:
                if self.try_acquire():
                    return True
                if self._depose_silent_leader(lease_seconds):
                    continue  # its lock is free now (or in a moment): try again at once
                holder = self._holder()
                seen = f"{holder.role}:{holder.since}"
                if seen != announced:
                    log.info(
                        "standing by node=%s leader=%s leader_since=%s",
                        self.node,
                        holder.role or "unknown",
                        holder.since or "unknown",
                    )
                    announced = seen
            except StoreError as error:
                log.warning("standing by: the database cannot be reached error=%s", error)
            stop.wait(retry_seconds)
        return False

    def check(self) -> None:
        """Raise LeadershipLostError unless this node still leads: its lock connection answers
        and the epoch is still its own. Renews ``renewed_at`` (the leader's heartbeat)."""
        with self._guard:
            epoch, connection = self.epoch, self._connection
            if epoch is None or connection is None:
                raise LeadershipLostError("this watchdog does not lead")
            # The update is the lease's renewal too: it moves the session's state_change.
            try:
                moved = connection.execute(
                    update(LeadershipRow)
                    .where(LeadershipRow.id == LEADERSHIP_ROW, LeadershipRow.epoch == epoch)
                    .values(renewed_at=self.clock.now())
                ).rowcount
            except SQLAlchemyError as error:
                self._drop_connection()
                self.epoch = None
                raise LeadershipLostError(
                    f"the leadership connection to {self.database} was lost: {_reason(error)}"
                ) from error
            if moved != 1:
                self.epoch = None
                raise LeadershipLostError(
                    f"another node took over the leadership of {self.database}"
                )

    # -- internals --------------------------------------------------------------------------

    def _lock_connection(self) -> Connection:
        if self._connection is None:
            # A connection of its own, outside every pool: its life is the lock's life.
            self._engine = create_engine(
                self._url, poolclass=NullPool, connect_args=postgres_connect_args(self._url)
            )
            connection = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            connection.execute(text(f"SET lock_timeout = '{LOCK_TIMEOUT}'"))
            self._connection = connection
        return self._connection

    def _depose_silent_leader(self, lease_seconds: float) -> bool:
        """Terminate the lock holder's session when it ran no statement for ``lease_seconds``
        (measured by the database's clock: no clock of ours is compared). True when one was."""
        if self._connection is None:
            return False
        try:
            deposed = self._connection.execute(
                _SILENT_HOLDER, {**_LOCK_KEY, "lease": lease_seconds}
            ).all()
        except SQLAlchemyError as error:
            log.warning("cannot check the leader's lease error=%s", _reason(error))
            return False
        for pid, terminated in deposed:
            log.warning(
                "deposing a silent leader node=%s leader_session=%s silent_for_more_than=%ss "
                "terminated=%s",
                self.node,
                pid,
                int(lease_seconds),
                terminated,
            )
        if deposed:
            self.clock.sleep(0.05)  # the terminated session's lock goes when it exits
        return bool(deposed)

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        engine, self._engine = self._engine, None
        if connection is not None:
            with contextlib.suppress(SQLAlchemyError):
                connection.close()
        if engine is not None:
            engine.dispose()

    def _next_epoch(self) -> int:
        """Count the epoch up and name this node the leader (on a short connection of its own:
        the lock connection stays in autocommit)."""
        assert self._engine is not None
        now = self.clock.now()
        with self._engine.begin() as transaction:
            transaction.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            # We hold the lock, so whoever still holds the row is a deposed leader inside a
            # fenced transaction (a frozen process): end it before it can commit a claim.
            for pid, _ in transaction.execute(_FENCED_TRANSACTIONS).all():
                log.warning("ended a deposed leader's open transaction session=%s", pid)
            current = transaction.execute(
                select(LeadershipRow.epoch)
                .where(LeadershipRow.id == LEADERSHIP_ROW)
                .with_for_update()
            ).scalar_one_or_none()
            epoch = (current or 0) + 1
            values = {"epoch": epoch, "node": self.node, "since": now, "renewed_at": now}
            if current is None:
                transaction.execute(insert(LeadershipRow).values(id=LEADERSHIP_ROW, **values))
            else:
                transaction.execute(
                    update(LeadershipRow).where(LeadershipRow.id == LEADERSHIP_ROW).values(**values)
                )
        return epoch

    def _holder(self) -> LockHolder:
        if self._engine is None:
            return LockHolder(pid=None, role="", since="")
        try:
            leader = read_leader(self._engine)
        except SQLAlchemyError:
            leader = None
        if leader is None:
            return LockHolder(pid=None, role="", since="")
        return LockHolder(
            pid=None,
            role=f"node {leader.node}",  # LockHolder.describe names the node
            since=leader.since.strftime("%Y-%m-%d %H:%M:%S UTC"),
        )


def _reason(error: SQLAlchemyError) -> str:
    original = getattr(error, "orig", None)
    return str(original).strip() if original is not None else type(error).__name__
