"""``watchdog-gpu config check --connect``: open the configured database the way the daemon
would, and say what is there — reachable or why not, the schema revision against this version's,
and on PostgreSQL who leads. Reads only: nothing is created, migrated or locked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import URL, Engine


@dataclass(frozen=True, slots=True)
class DatabaseCheck:
    """What ``--connect`` found. ``ok`` False: the daemon could not use it as it is."""

    ok: bool
    lines: tuple[str, ...]


def check_database(url: str) -> DatabaseCheck:
    """Connect to ``url`` (its password filled in) read-only and report."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from watchdog_gpu.store import create_engine_for, display_url

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return DatabaseCheck(False, ("database: not a database URL",))
    shown = display_url(parsed)
    if missing_sqlite_file(parsed):
        return DatabaseCheck(
            True, (f"database: {shown}: no file yet (the daemon creates it at start)",)
        )
    try:
        engine = create_engine_for(parsed)
    except (ArgumentError, ValueError, ImportError, OSError) as error:
        return DatabaseCheck(False, (f"database: {shown}: cannot use it: {error}",))
    try:
        return DatabaseCheck(True, tuple(_found(engine, shown)))
    except SQLAlchemyError as error:
        reason = getattr(error, "orig", None) or type(error).__name__
        return DatabaseCheck(False, (f"database: {shown}: cannot connect: {reason}".strip(),))
    finally:
        engine.dispose()


def missing_sqlite_file(url: URL) -> bool:
    """An SQLite URL naming no existing file (in memory, or a file not created yet)."""
    if url.get_backend_name() != "sqlite":
        return False
    return url.database in (None, "", ":memory:") or not Path(url.database).expanduser().is_file()


def _found(engine: Engine, shown: str) -> list[str]:
    """What a connection to ``engine`` finds: the server, the schema, the leader."""
    from sqlalchemy import text

    postgres = engine.dialect.name == "postgresql"
    with engine.connect() as connection:
        version = connection.execute(
            text("SELECT version()" if postgres else "SELECT 1")
        ).scalar_one()
    lines = [f"database: {shown}: reachable" + _version(version, engine.dialect.name)]
    lines.append(_schema_line(_revision(engine)))
    if postgres:
        lines.append(f"  leader: {_leader(engine)}")
    return lines


def _schema_line(revision: str | None) -> str:
    from watchdog_gpu.store.revisions import shipped_head

    head = shipped_head()
    if revision is None:
        return "  schema: empty (the daemon migrates it at start)"
    if revision == head:
        return f"  schema: revision {revision}, this version's"
    return (
        f"  schema: revision {revision}; this version ships {head} "
        "(the daemon migrates forward at start; a newer revision is refused)"
    )


def _version(version: object, dialect: str) -> str:
    if dialect != "postgresql":
        return ""
    words = str(version).split()
    return f" ({' '.join(words[:2])})" if len(words) >= 2 else ""


def _revision(engine: Engine) -> str | None:
    from watchdog_gpu.store.migrate import current_revision

    return current_revision(engine)


def _leader(engine: Engine) -> str:
    from sqlalchemy.exc import SQLAlchemyError

    from watchdog_gpu.store.leadership import read_leader, someone_leads

    try:
        leader = read_leader(engine)
    except SQLAlchemyError:
        leader = None
    if not someone_leads(engine):
        return "nobody leads now" + (f" (last: node {leader.node})" if leader else "")
    if leader is None:
        return "a node holds the lock"
    return f"node {leader.node}, epoch {leader.epoch}"
