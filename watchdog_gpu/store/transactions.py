"""The transactions every part of the ``Store`` runs in: ``StoreBase``.

Each method of the Store is one transaction on its own session or connection, or joins the
thread's open batch; a leader's fence is checked before each write; database failures become
:class:`~watchdog_gpu.errors.StoreError` with the driver's reason (never the SQL parameters).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError
from sqlalchemy.orm import Session, sessionmaker

from watchdog_gpu.errors import StoreError
from watchdog_gpu.store.engine import writing
from watchdog_gpu.store.leadership import Fence, check_fence, read_leader
from watchdog_gpu.store.rows import Leader
from watchdog_gpu.store.types import NaiveDatetimeError


class StoreBase:
    """The engine, the sessions, the thread's batch and the leader's fence of a Store."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._readers = sessionmaker(engine, expire_on_commit=False)
        self._write_engine = writing(engine)
        self._writers = sessionmaker(self._write_engine, expire_on_commit=False)
        # The leader's fence on a shared PostgreSQL (store/leadership.py): when set, every
        # write transaction first proves its epoch is current and its lock session still holds
        # the lock, or raises LeadershipLostError — a deposed leader writes nothing.
        self.fence: Fence | None = None
        self._batch = threading.local()  # .state: the thread's open _Batch, if any

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

    def _after_commit(self, call: Callable[[], None]) -> None:
        """Call ``call`` once what this thread wrote is committed: now, or at the end of its
        batch (never, when the batch rolls back)."""
        state: _Batch | None = getattr(self._batch, "state", None)
        if state is None:
            call()
        else:
            state.after_commit.append(call)

    def leader(self) -> Leader | None:
        """Who leads the watchdogs sharing this database (PostgreSQL; None: nobody ever led,
        as on SQLite, where one daemon holds a file lock instead)."""
        with _store_errors():
            return read_leader(self.engine)


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
