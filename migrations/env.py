"""Alembic environment of watchdog-gpu.

Run time (``watchdog_gpu.store.migrate.upgrade_to_head``): the caller passes an open connection in
``config.attributes["connection"]`` (on SQLite with foreign keys off and a transaction begun).

Development (``alembic`` command in a source checkout; ``[tool.alembic]`` in pyproject.toml):
``alembic -x db=sqlite:///dev.db revision --autogenerate -m "what changed"`` builds an engine
from ``-x db=URL`` (or ``sqlalchemy.url``).

There is deliberately no ``logging.config.fileConfig`` here: it would reset the daemon's logging.
"""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection

from watchdog_gpu.store.engine import create_engine_for
from watchdog_gpu.store.schema import metadata
from watchdog_gpu.store.types import UtcDateTime

config = context.config


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Render our column types as plain SQLAlchemy types, so migration scripts never import the
    application (a migration must keep working after the code it came from changed)."""
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime()"
    return False


def run_with(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things: batch mode copies the table
        compare_type=True,
        render_item=render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=metadata,
        render_as_batch=True,
        literal_binds=True,
        render_item=render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("db") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("give the database: alembic -x db=sqlite:///path/to.db ...")
    return url


def run_online() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        run_with(given)
        return
    engine = create_engine_for(database_url())
    try:
        with engine.connect() as connection:
            raw = connection.connection.driver_connection
            if engine.dialect.name == "sqlite" and raw is not None:
                raw.execute("PRAGMA foreign_keys = OFF")  # see store/migrate.py
            run_with(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
