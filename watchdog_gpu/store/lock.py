"""One active watchdog per database: the lock a daemon (and ``once``) holds while it acts.

SQLite: an exclusive ``flock`` on ``<database>.lock`` (released by the kernel however the process
dies; the file stays, since deleting a lock file races with the next taker). PostgreSQL: leader
election (``store/leadership.py``). Other databases: :class:`NoLock`. Readers and the operator's
short writes never take it. ``docs/database.md``, "One active watchdog per database".
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Protocol

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from watchdog_gpu.clock import Clock, SystemClock
from watchdog_gpu.errors import DatabaseInUseError, StoreError

log = logging.getLogger(__name__)

# Who holds the lock, and who is refused, as the refusal message names them.
HOLDERS = {
    "run": "a watchdog-gpu daemon",
    "once": "`watchdog-gpu once`",
    "db upgrade": "`watchdog-gpu db upgrade`",
    "db copy": "`watchdog-gpu db copy`",
}
REFUSED = {
    "run": "this second daemon",
    "once": "`watchdog-gpu once`",
    "db upgrade": "`watchdog-gpu db upgrade`",
    "db copy": "`watchdog-gpu db copy` (a database in use changes while it is copied)",
}

RETRY_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds a lock, as it wrote itself into the lock file (fields may be unknown)."""

    pid: int | None
    role: str
    since: str

    def describe(self) -> str:
        if self.role.startswith("node "):  # PostgreSQL leadership (store/leadership.py)
            who = f"the watchdog-gpu daemon of {self.role}"
        else:
            who = HOLDERS.get(self.role, "another watchdog-gpu process")
        details = [
            f"pid {self.pid}" if self.pid is not None else "",
            self.since and f"since {self.since}",
        ]
        shown = ", ".join(detail for detail in details if detail)
        return f"{who} ({shown})" if shown else who


class DatabaseLock(Protocol):
    """The seam: take the database's lock for this process, or raise DatabaseInUseError."""

    def acquire(self, *, wait_seconds: float = 0.0) -> None:
        """Take the lock, trying for up to ``wait_seconds``. Raises DatabaseInUseError (with
        ``holder`` when known) when another process keeps it, StoreError when the lock itself
        cannot be set up."""

    def release(self) -> None:
        """Give the lock back (idempotent)."""


class LockHeldError(DatabaseInUseError):
    """The lock is held; ``holder`` says by whom."""

    def __init__(self, holder: LockHolder, database: str, role: str) -> None:
        self.holder = holder
        refused = REFUSED.get(role, role)
        super().__init__(
            f"the database {database} is in use by {holder.describe()}: only one process may "
            f"act on a database at a time, so {refused} is refused. Stop the other one first "
            "(`systemctl stop watchdog-gpu` for the service); `watchdog-gpu status` and "
            "`watchdog-gpu events` read the database while a daemon runs"
        )


class NoLock:
    """No lock: in-memory databases and servers whose leader election is not implemented yet."""

    def acquire(self, *, wait_seconds: float = 0.0) -> None:
        return None

    def release(self) -> None:
        return None


class FileLock:
    """An exclusive ``flock`` on ``path`` (see the module docstring)."""

    def __init__(self, path: Path, *, role: str, database: str, clock: Clock | None = None) -> None:
        self.path = path
        self.clock = clock or SystemClock()
        self.role = role
        self.database = database
        self._descriptor: int | None = None

    def acquire(self, *, wait_seconds: float = 0.0) -> None:
        if self._descriptor is not None:
            return
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise StoreError(f"cannot open the lock file {self.path}: {error}") from error
        deadline = self.clock.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if self.clock.monotonic() >= deadline:
                    holder = _read_holder(descriptor)
                    os.close(descriptor)
                    raise LockHeldError(holder, self.database, self.role) from None
                self.clock.sleep(RETRY_SECONDS)
            except OSError as error:  # e.g. ENOLCK: a file system without locks
                os.close(descriptor)
                raise StoreError(f"cannot lock {self.path}: {error}") from error
        self._descriptor = descriptor
        since = self.clock.now().astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n{self.role}\n{since}\n".encode(), 0)
        except OSError as error:  # the lock is held; only the holder's note is missing
            log.warning("cannot write the lock holder path=%s error=%s", self.path, error)

    def release(self) -> None:
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        try:
            os.ftruncate(descriptor, 0)  # the next reader sees no stale holder
        finally:
            os.close(descriptor)  # closing the last descriptor releases the flock


def _read_holder(descriptor: int) -> LockHolder:
    try:
        text = os.pread(descriptor, 200, 0).decode("utf-8", errors="replace")
    except OSError:
        text = ""
    fields = [*text.splitlines(), "", "", ""]
    pid = int(fields[0]) if fields[0].isdigit() else None
    return LockHolder(pid=pid, role=fields[1], since=fields[2])


def lock_path(database: Path) -> Path:
    """The lock file of the SQLite file ``database``: ``<database>.lock`` beside it."""
    return database.with_name(database.name + ".lock")


def database_lock(url: str, *, role: str, node: str | None = None) -> DatabaseLock:
    """The lock of the database at ``url`` for a process acting as ``role`` (``run``, ``once``,
    ``db upgrade``): a :class:`FileLock` for an SQLite file, the leadership of ``node`` (default:
    this host's name) on PostgreSQL (store/leadership.py), :class:`NoLock` otherwise."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return NoLock()  # opening the database reports the bad URL
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "postgresql":
        from watchdog_gpu.store.leadership import PostgresLeadership

        return PostgresLeadership(url, role=role, node=node or socket.gethostname(), database=shown)
    if parsed.get_backend_name() != "sqlite":
        return NoLock()
    if parsed.database in (None, "", ":memory:") or parsed.query.get("uri"):
        return NoLock()
    return FileLock(
        lock_path(Path(parsed.database).expanduser().absolute()), role=role, database=shown
    )
