"""Alembic migrations at run time: find the scripts, upgrade a database to head.

The scripts live at the top level of a source checkout (``migrations/``) and inside the installed
wheel as ``watchdog_gpu/migrations`` (pyproject's hatch ``force-include``). No ``alembic.ini`` is
read at run time, and the migration environment does not touch logging.

A database already at head (every start but the first after an upgrade) is recognised without
importing Alembic (megabytes resident for the process's life): the head is read from the
scripts' ``revision``/``down_revision`` lines (``store.revisions``) and compared with the
``alembic_version`` row. Any
other case — an empty database, one behind, one written by a newer watchdog-gpu, scripts that do
not form one chain — goes through Alembic as before.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from watchdog_gpu.errors import SchemaTooNewError, StoreError
from watchdog_gpu.store.engine import display_url
from watchdog_gpu.store.revisions import migrations_directory, shipped_head

if TYPE_CHECKING:
    from alembic.config import Config

logger = logging.getLogger(__name__)


def alembic_config() -> Config:
    """An Alembic ``Config`` pointing at the migrations, with no ini file (alembic is imported
    lazily: it costs a quarter of a second and only migrations need it)."""
    from alembic.config import Config

    # Alembic's default stdout is bound when alembic.config is first imported: name today's, or a
    # later call writes to whatever stream was current then (a closed one, in a test run).
    config = Config(stdout=sys.stdout)
    config.set_main_option("script_location", str(migrations_directory()))
    return config


@dataclass(frozen=True, slots=True)
class MigrationResult:
    """The revision a database was at before and after an upgrade (``None``: empty database)."""

    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.before != self.after


def head_revision() -> str | None:
    """The newest revision the shipped migrations know."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` for a database never migrated)."""
    from alembic.runtime.migration import MigrationContext

    try:
        with engine.connect() as connection:
            revision: str | None = MigrationContext.configure(connection).get_current_revision()
            return revision
    except SQLAlchemyError as error:
        raise StoreError(f"cannot read the database revision: {_reason(error)}") from error


def revision_if_at_head(engine: Engine) -> str | None:
    """The database's revision when it is the shipped head, read with one query and without
    Alembic; ``None`` when it is not (or cannot be told this way: no version table yet, several
    rows, an error) — the caller then asks Alembic."""
    head = shipped_head()
    if head is None:
        return None
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    except SQLAlchemyError:  # no version table (an empty database) or not readable: Alembic
        return None
    return head if [row[0] for row in rows] == [head] else None


def upgrade_to_head(engine: Engine) -> MigrationResult:
    """Migrate the database behind ``engine`` to the newest revision; a no-op when it is there.

    On SQLite the migration runs with foreign keys OFF: batch mode recreates tables ("move and
    copy"), which would fail or cascade with them on; the pragma only works outside a
    transaction, so it is set on the raw connection before BEGIN, and a foreign-key check runs
    before the commit. Raises StoreError when the database cannot be opened or migrated, and
    SchemaTooNewError (before touching anything) when a newer watchdog-gpu wrote it. A database
    already at head returns at once, without importing Alembic (:func:`revision_if_at_head`).
    """
    at_head = revision_if_at_head(engine)
    if at_head is not None:
        return MigrationResult(before=at_head, after=at_head)
    from alembic import command

    config = alembic_config()
    before = current_revision(engine)
    refuse_newer_schema(before, engine, config)
    sqlite = engine.dialect.name == "sqlite"
    try:
        with engine.connect() as connection:
            raw = connection.connection.driver_connection
            if sqlite and raw is not None:
                raw.execute("PRAGMA foreign_keys = OFF")
            try:
                with connection.begin():
                    config.attributes["connection"] = connection
                    command.upgrade(config, "head")
                    if sqlite:
                        _check_foreign_keys(connection)
            finally:
                if sqlite and raw is not None:
                    raw.execute("PRAGMA foreign_keys = ON")
    except SQLAlchemyError as error:
        raise StoreError(
            f"cannot migrate the database {display_url(engine)}: {_reason(error)}"
        ) from error
    after = current_revision(engine)
    if before != after:
        logger.info("database migrated from_revision=%s to_revision=%s", before, after)
    return MigrationResult(before=before, after=after)


def refuse_newer_schema(revision: str | None, engine: Engine, config: Config | None = None) -> None:
    """Raise SchemaTooNewError when ``revision`` (the database's) is not one of the shipped
    migrations: Alembic would fail with a long traceback ("Can't locate revision"), and
    downgrading a newer schema is not ours to do."""
    if revision is None:
        return
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(config or alembic_config())
    known = {script.revision for script in scripts.walk_revisions()}
    if revision not in known:
        raise SchemaTooNewError(revision, display_url(engine))


def _check_foreign_keys(connection: Connection) -> None:
    problems = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if problems:
        raise StoreError(f"the migration left {len(problems)} broken foreign key(s)")


def _reason(error: SQLAlchemyError) -> str:
    """The driver's message without the SQL statement and parameters."""
    original = getattr(error, "orig", None)
    return str(original) if original is not None else type(error).__name__
